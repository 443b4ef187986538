// The capability matrix of `mxmoe backends` and docs/BACKENDS.md, derived by running each
// backend's own check() over a grid of deployments, so the table cannot drift from the code.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "contract/backend.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe {

struct CapabilityRow {
  std::string backend;
  std::string description;
  std::string numerics_class;        // Backend::numerics_class()
  std::string isa;                   // features required (from a run with every feature off)
  std::vector<std::string> formats;  // per all_activation_formats(): "yes", "yes, invariant", "no"
  std::string activation_fns;        // those accepted for some format and routing
  std::string routing_methods;
  std::string alignment;  // from a deliberately misaligned layer
  std::string notes;      // refusals on every cell (not_compiled, no_device), exceptions
};

// Grid: activation formats x batch_invariant x activation functions x routing methods, on
// `base` hardware with every ISA feature granted. ISA requirements come from a run with
// every feature off.
std::vector<CapabilityRow> capability_matrix(std::span<const Backend* const> backends,
                                             const Hardware& base);

// The table as GitHub markdown, or aligned plain text for a terminal.
std::string format_capability_markdown(const std::vector<CapabilityRow>& rows);
std::string format_capability_text(const std::vector<CapabilityRow>& rows);

}  // namespace mxmoe
