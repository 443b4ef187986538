// The registry: an immutable array built from backends.inc. Each backend's file gives its
// description (a BackendDescription: data and the kernel binding); the Backends are made here,
// once, in the list's order, on first use (function-local statics: thread-safe, no global
// constructor runs before main).
#include "backends/registry.hpp"

#include <array>
#include <span>
#include <string>
#include <vector>

#include "backends/described_backend.hpp"

namespace mxmoe {
namespace backends {
#define MXMOE_BACKEND(NAME) BackendDescription NAME();
#include "backends/backends.inc"
#undef MXMOE_BACKEND
}  // namespace backends

std::span<const Backend* const> registered_backends() {
#define MXMOE_BACKEND(NAME) static const DescribedBackend NAME##_backend(backends::NAME());
#include "backends/backends.inc"
#undef MXMOE_BACKEND
  static const auto all = std::to_array<const Backend*>({
#define MXMOE_BACKEND(NAME) &NAME##_backend,
#include "backends/backends.inc"
#undef MXMOE_BACKEND
  });
  return all;
}

const Backend* find_backend(std::string_view name) {
  return find_backend(name, registered_backends());
}

std::string backend_names() {
  return backend_names(registered_backends());
}

std::string unknown_backend_message(std::string_view what, std::string_view name) {
  return unknown_backend_message(what, name, registered_backends());
}

std::vector<std::string> registered_backend_names() {
  std::vector<std::string> names;
  for (const Backend* b : registered_backends()) names.emplace_back(b->name());
  return names;
}

}  // namespace mxmoe
