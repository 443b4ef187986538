// Hardware as a JSON value (the public to_json/hardware_from_json are this plus dump/parse).
#pragma once

#include "base/json.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe::json_io {

using json::Json;

Json hardware_to_json(const Hardware&);
Hardware hardware_from_json(const Json&);

}  // namespace mxmoe::json_io
