// The byte ranges of a layer's weight views that computing reads at every call, for the
// overlap check of outputs against them (mxmoe/edge_checks.hpp): the runtime's, because the
// ranges are edge checks' ArrayBytes (the model room knows views, not the edges' checks).
#pragma once

#include <vector>

#include "mxmoe/edge_checks.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

// The byte ranges of WEIGHTS' views a layer reads at every call: the routed experts' weights
// and biases (EXPERTS), the shared expert's (SHARED), the hash table (TOKEN_TABLE); each named
// ("w2 bias"), adjacent ranges of one name merged. An output may share none of them.
std::vector<ArrayBytes> weight_bytes(const LayerWeights& weights, bool experts, bool shared,
                                     bool token_table);

}  // namespace mxmoe
