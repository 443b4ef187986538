// Which experts a process holds when a layer's experts are spread over an expert-parallel
// group. One function owns the split, so every part of mxmoe (the layer, the oracle's cost
// and memory figures, the tools) agrees on it.
#pragma once

#include "mxmoe/export.h"

namespace mxmoe {

// Experts [begin, end) of a layer.
struct MXMOE_API ExpertRange {
  int begin = 0, end = 0;
  int size() const noexcept { return end - begin; }
  bool contains(int expert) const noexcept { return expert >= begin && expert < end; }
  friend bool operator==(const ExpertRange&, const ExpertRange&) = default;
};

// Contiguous ranges as even as possible: rank r of n holds [r*E/n, (r+1)*E/n) (sizes differ
// by at most one). Throws std::invalid_argument unless 1 <= n and 0 <= r < n and E >= 0.
MXMOE_API ExpertRange contiguous_expert_range(int num_experts, int ep_size, int ep_rank);

}  // namespace mxmoe
