// Which guarded mappings (base/mapped_reads.hpp) a layer's weight views read: the model room
// knows the views, the base room only addresses.
#pragma once

#include <vector>

#include "mxmoe/edge_checks.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

// The slots of the registered mappings that hold bytes of WEIGHTS (sorted, distinct; empty
// for weights in ordinary memory).
std::vector<int> mapped_sources(const LayerWeights& weights);

// The byte ranges of WEIGHTS' views a layer reads at every call: the routed experts' weights
// and biases (EXPERTS), the shared expert's (SHARED), the hash table (TOKEN_TABLE); each named
// ("w2 bias"), adjacent ranges of one name merged. An output may share none of them.
std::vector<ArrayBytes> weight_bytes(const LayerWeights& weights, bool experts, bool shared,
                                     bool token_table);

}  // namespace mxmoe
