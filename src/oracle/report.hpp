// Text forms of a Selection beyond those in mxmoe/reports.hpp.
#pragma once

#include <string>

#include "mxmoe/deployment.hpp"
#include "mxmoe/reason_codes.hpp"
#include "mxmoe/selection.hpp"

namespace mxmoe {

// "weight_key=mxfp4, activation_key=bf16, batch_invariant=true, ep_size=1, ..." : every
// field of the deployment a user needs to recognise it.
std::string describe_deployment(const Deployment& d);

// "code: detail (required X, got Y; remedy: Z)"
std::string describe_rejection(const Rejection& r);

// One line per candidate for MXMOE_VERBOSE=dispatch: "mxmoe dispatch: NAME: VERDICT ...".
std::string format_dispatch_log(const Selection& s);

}  // namespace mxmoe
