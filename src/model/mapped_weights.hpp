// Which guarded mappings (base/mapped_reads.hpp) a layer's weight views read: the model room
// knows the views, the base room only addresses.
#pragma once

#include <vector>

#include "mxmoe/weights.hpp"

namespace mxmoe {

// The slots of the registered mappings that hold bytes of WEIGHTS (sorted, distinct; empty
// for weights in ordinary memory).
std::vector<int> mapped_sources(const LayerWeights& weights);

}  // namespace mxmoe
