// The ExpertKernel shared by the integer-activation backends (the int8 class, and the int16
// class: avx2_int16, neon_int16): weights packed once into 16-row groups (int8_kernels.hpp),
// then per forward call three parallel phases over (expert, 32-row tile): quantize inputs,
// GEMM1 + GLU + requantize, GEMM2 + bias. The ISA work goes through the backend's QuantOps.
#pragma once

#include <memory>

#include "backends/integer/quant_ops.hpp"
#include "backends/kernel.hpp"
#include "mxmoe/deployment.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::int8_backend {

// The caller made sure the CPU (and for AMX the OS permission) allows the table's
// instructions. Throws std::invalid_argument when the weights disagree with spec.
std::unique_ptr<ExpertKernel> make_quant_expert_kernel(const LayerSpec& spec,
                                                       const LayerWeights& weights,
                                                       const Int8Ops& ops);
std::unique_ptr<ExpertKernel> make_quant_expert_kernel(const LayerSpec& spec,
                                                       const LayerWeights& weights,
                                                       const Int16Ops& ops);

// A BackendDescription::create for the table OPS (a constant of the backend's file).
template <const auto& Ops>
std::unique_ptr<ExpertKernel> create(const Deployment& d, const LayerWeights& weights) {
  return make_quant_expert_kernel(d.layer, weights, Ops);
}

}  // namespace mxmoe::int8_backend
