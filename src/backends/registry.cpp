// The registry: an immutable array built from backends.inc.
#include <array>
#include <span>

#include "mxmoe/oracle.hpp"

namespace mxmoe {
namespace backends {
#define MXMOE_BACKEND(NAME) const Backend& NAME();
#include "backends/backends.inc"
#undef MXMOE_BACKEND
}  // namespace backends

std::span<const Backend* const> registered_backends() {
  static const auto all = std::to_array<const Backend*>({
#define MXMOE_BACKEND(NAME) &backends::NAME(),
#include "backends/backends.inc"
#undef MXMOE_BACKEND
  });
  return all;
}

const Backend* find_backend(std::string_view name) {
  return find_backend(name, registered_backends());
}

}  // namespace mxmoe
