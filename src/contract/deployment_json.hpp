// Request and Deployment as nlohmann::json values (the public to_json/..._from_json of
// mxmoe/deployment.hpp are these plus dump/parse), the pieces the oracle's documents (a
// Selection, the output of `mxmoe explain --json`) are built from, so each has one JSON form.
#pragma once

#include "hw/hardware_json.hpp"
#include "model/layer_spec_json.hpp"
#include "mxmoe/deployment.hpp"

namespace mxmoe::json_io {

Json request_to_json(const Request&);
Request request_from_json(const Json&);

Json deployment_to_json(const Deployment&);
Deployment deployment_from_json(const Json&);

}  // namespace mxmoe::json_io
