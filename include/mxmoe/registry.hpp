// The registered backends (the list in src/backends/backends.inc) and the forms of the name
// functions that default to them. The registry sits between the contract (mxmoe/backend.hpp),
// which its backends implement, and the oracle (mxmoe/judge.hpp), which is handed candidates:
// only code at or above the registry names it.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "mxmoe/backend.hpp"
#include "mxmoe/export.h"

namespace mxmoe {

// The registered backends, immutable, in the list's order (also the tie-break).
MXMOE_API std::span<const Backend* const> registered_backends();
// find_backend(name, registered_backends()).
MXMOE_API const Backend* find_backend(std::string_view name);
// backend_names(registered_backends()).
MXMOE_API std::string backend_names();
// unknown_backend_message(what, name, registered_backends()).
MXMOE_API std::string unknown_backend_message(std::string_view what, std::string_view name);

}  // namespace mxmoe
