// The registered backends (the list in src/backends/backends.inc) and the forms of the name
// functions that default to them. The registry sits between the contract (contract/backend.hpp),
// which its backends implement, and the oracle (oracle/candidates.hpp), which is handed
// candidates: only code at or above the registry names it. Hosts see the names alone
// (mxmoe/registry.hpp).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "contract/backend.hpp"
#include "mxmoe/registry.hpp"

namespace mxmoe {

// The registered backends, immutable, in the list's order (also the tie-break).
std::span<const Backend* const> registered_backends();
// find_backend(name, registered_backends()).
const Backend* find_backend(std::string_view name);
// backend_names(registered_backends()).
std::string backend_names();
// unknown_backend_message(what, name, registered_backends()).
std::string unknown_backend_message(std::string_view what, std::string_view name);

}  // namespace mxmoe
