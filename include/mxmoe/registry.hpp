// The registered backends as a host sees them: by name. (The backends themselves, and the
// oracle's forms that take them, are the library's own.)
#pragma once

#include <string>
#include <vector>

#include "mxmoe/export.h"

namespace mxmoe {

// The registered backends' names, in the registry's order (best-known first, also the
// tie-break): every name judge() gives a verdict on, and Request.backend may force.
MXMOE_API std::vector<std::string> registered_backend_names();

}  // namespace mxmoe
