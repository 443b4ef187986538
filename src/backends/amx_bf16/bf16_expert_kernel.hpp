// The ExpertKernel of the amx_bf16 backend: weights packed once into 16-row groups
// (backends/group16), then per forward call three parallel phases: round each slot's input
// to bf16; per (expert, 32 intermediate units) decode 4 groups to bf16 B tiles, TDPBF16PS,
// GLU, round to bf16; per (expert, 32 output rows) decode 2 groups, TDPBF16PS, + b2.
// Every slot count goes through the same tiles, so the backend is batch invariant.
#pragma once

#include <memory>

#include "backends/kernel.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::amx_bf16_backend {

// The caller made sure the CPU and the OS allow AMX-BF16. Throws std::invalid_argument when
// the weights disagree with spec.
std::unique_ptr<ExpertKernel> make_amx_bf16_kernel(const LayerSpec& spec,
                                                   const LayerWeights& weights);

}  // namespace mxmoe::amx_bf16_backend
