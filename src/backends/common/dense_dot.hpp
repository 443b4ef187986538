// The dot products of the dense expert (backends/common/dense_expert.cpp; its AVX2 kernel is
// backends/dense/kernels/avx2): a weight row of K values (float32 or bf16) times activation
// rows of K floats, float32 fused multiply-adds.
//
// The one order, for every path (the portable one here and kernels/avx2): 8 lanes, lane l
// accumulates acc[l] = fma(w[k], x[k], acc[l]) for k = l, l + 8, l + 16, ... in order, then
// s = ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)). A (row, token) sum
// is therefore the same bits whatever the tile, the batch or the thread that computes it,
// and the AVX2 kernel gives the same bits as the portable code (an FMA rounds once either way).
// Plain data and function declarations only (no inline code shared with ISA objects).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mxmoe::dense {

inline constexpr int kLanes = 8;
inline constexpr int kMaxRows = 2;    // weight rows per call
inline constexpr int kMaxTokens = 4;  // activation rows per call

struct DenseRows {
  const void* w = nullptr;  // rows of k elements, `stride` elements apart
  bool bf16 = false;        // elements are bf16 bits (else float32)
  std::int64_t stride = 0;
  std::int64_t k = 0;  // a multiple of kLanes
};

// out[n * tokens + t] = sum_k w[n][k] * x[t][k] for rows n < rows (1..kMaxRows) and tokens
// t < tokens (1..kMaxTokens), in the order above.
using DenseDotFn = void (*)(const DenseRows& w, int rows, const float* const* x, int tokens,
                            float* out);

void dense_expert_dot_2x4__portable(const DenseRows& w, int rows, const float* const* x, int tokens,
                                    float* out) noexcept;

// Compiled only on x86-64 (kernels/avx2); call it only when MXMOE_X86_KERNELS.
void dense_expert_dot_2x4__avx2(const DenseRows& w, int rows, const float* const* x, int tokens,
                                float* out) noexcept;

}  // namespace mxmoe::dense
