// The ExpertKernel shared by the int8-activation backends: weights packed once into
// 16-row groups (int8_kernels.hpp), then per forward call three parallel phases over
// (expert, 32-row tile): quantize inputs, GEMM1 + GLU + requantize, GEMM2 + bias.
#pragma once

#include <memory>

#include "backends/kernel.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::int8_backend {

// use_amx: experts with at least 16 slots go through AMX tiles, the others through VNNI;
// both produce identical bits. The caller made sure the CPU (and for AMX the OS permission)
// allows the instructions. Throws std::invalid_argument when the weights disagree with spec.
std::unique_ptr<ExpertKernel> make_int8_expert_kernel(const LayerSpec& spec,
                                                      const LayerWeights& weights, bool use_amx);

}  // namespace mxmoe::int8_backend
