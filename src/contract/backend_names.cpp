// Candidates by name: the one that answers to a name (now or formerly), the list of names,
// and the one message for a name none answers to. Handed their candidates, so the contract
// needs no registry (mxmoe/registry.hpp has the forms that default to it).
#include <fmt/format.h>

#include "base/printable.hpp"
#include "contract/backend.hpp"

namespace mxmoe {

const Backend* find_backend(std::string_view name, std::span<const Backend* const> candidates) {
  for (const Backend* b : candidates) {
    if (b->name() == name) return b;
    for (std::string_view former : b->former_names())
      if (former == name) return b;
  }
  return nullptr;
}

std::string backend_names(std::span<const Backend* const> candidates) {
  std::string names;
  for (const Backend* b : candidates) names += (names.empty() ? "" : ", ") + std::string(b->name());
  return names;
}

std::string unknown_backend_message(std::string_view what, std::string_view name,
                                    std::span<const Backend* const> candidates) {
  const std::string valid = backend_names(candidates);
  return fmt::format("{}: unknown backend '{}'; valid backends: {}", what, printable(name),
                     valid.empty() ? "none registered" : valid);
}

}  // namespace mxmoe
