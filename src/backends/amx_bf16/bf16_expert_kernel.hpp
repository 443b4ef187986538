// The ExpertKernel of the amx_bf16 backend: weights packed once into 16-row groups
// (backends/group16), then per forward call three parallel phases: round each slot's input
// to bf16 (or MXFP8, whose values are bf16 values); per (expert, 32 intermediate units)
// decode 4 groups to bf16 B tiles, TDPBF16PS, GLU, round to bf16 (one MX block of the next
// projection's input: mxfp8 rounds it here, with the portable activation); per (expert, 32 output
// rows) decode 2 groups, TDPBF16PS, + b2. Every slot count goes through the same tiles, so the
// backend is batch invariant.
#pragma once

#include <memory>

#include "backends/amx_bf16/amx_bf16_ops.hpp"
#include "backends/kernel.hpp"
#include "mxmoe/deployment.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::amx_bf16_backend {

// The caller made sure the CPU and the OS allow the table's instructions (AMX-BF16). format:
// bf16, or mxfp8 (its values are bf16 values: format/activation_rounding.hpp). Throws
// std::invalid_argument when the weights disagree with spec or for another format.
std::unique_ptr<ExpertKernel> make_amx_bf16_kernel(const LayerSpec& spec,
                                                   const LayerWeights& weights,
                                                   ActivationFormat format,
                                                   const AmxBf16Ops& ops);

}  // namespace mxmoe::amx_bf16_backend
