// LayerSpec as a JSON value (the public to_json/layer_spec_from_json are this plus
// dump/parse).
#pragma once

#include "base/json.hpp"
#include "mxmoe/layer_spec.hpp"

namespace mxmoe::json_io {

using json::Json;

Json layer_spec_to_json(const LayerSpec&);
LayerSpec layer_spec_from_json(const Json&);

}  // namespace mxmoe::json_io
