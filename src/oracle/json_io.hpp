// The plain-data types as nlohmann::json values (the public to_json/..._from_json functions
// are these plus dump/parse). Composite documents (a Deployment, a Selection, the output of
// `mxmoe explain --json`) are built from these pieces so every type has one JSON form.
#pragma once

#include "contract/deployment_json.hpp"
#include "mxmoe/selection.hpp"

namespace mxmoe::json_io {

Json rejection_to_json(const Rejection&);
Rejection rejection_from_json(const Json&);

Json verdict_to_json(const Verdict&);
Verdict verdict_from_json(const Json&);

Json suggestion_to_json(const Suggestion&);
Suggestion suggestion_from_json(const Json&);

Json selection_to_json(const Selection&);
Selection selection_from_json(const Json&);

}  // namespace mxmoe::json_io
