// The dense expert: one expert whose weights are not MXFP4 (DeepSeek-V4's shared expert, FP8
// E4M3 with 128 x 128 block scales in the release, bf16 or f32 elsewhere), computed the same
// way whatever the routed experts' backend:
//   x_q = Q(x) (round_activations, the Request's format, per token)
//   h   = W1 . x_q, a = Q(act(gate, up)), out = W2 . a
// with the weights dequantized once at creation to bf16 when every value is exactly a bf16
// (bf16 storage; E4M3 x E8M0 scales unless far outside the bf16 range), else to float32
// (one rounding for E4M3 x float32 scales), and float32 FMA dot products in the fixed order
// of backends/common/dense_dot.hpp. Batch invariant by construction: per-token rounding,
// every (row, token) sum the same sequence of operations, work split over rows and tokens.
#pragma once

#include <memory>

#include "backends/kernel.hpp"
#include "mxmoe/deployment.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

// w1 [2I, H] in spec.gate_up_layout and w2 [H, I] for spec (num_experts == 1, intermediate
// = I). Uses the AVX2 kernel when the hardware has avx2 and fma and the build compiled it
// (same bits as the portable path). Throws std::invalid_argument when the views disagree
// with the spec.
std::unique_ptr<ExpertKernel> make_dense_expert_kernel(const Deployment& d,
                                                       const DenseMatrixView& w1,
                                                       const DenseMatrixView& w2);

}  // namespace mxmoe
