// The avx512_bf16 backend's ISA kernels (kernels/bf16_dpbf16_strips__avx512_bf16.cpp, compiled with
// the avx512_bf16 flags): MXFP4 strips decoded to bf16 in registers (vpermw table lookup), dot
// products with vdpbf16ps.
//
// Exactness: E2M1 x 2^(code-127) is a bf16 value, and the block scale is folded into the
// lookup table by adding (code-127) to the exponent field of its nonzero entries. vdpbf16ps
// treats bf16 subnormal inputs as zero and flushes subnormal products and sums, so strips
// with a code whose scaled elements come near the subnormal range (code < 64) or overflow
// (code > 250) are decoded unscaled instead, and the scale multiplies each block's fp32
// partial in a regular FMA (strip.scale_outside; see strip_kernel.cpp).
#pragma once

#include <cstdint>

#include "backends/float/strip_ops.hpp"

namespace mxmoe::avx512_bf16_kernels {

inline constexpr int kMaxTokens = 6;  // 4 rows x 6 tokens of zmm accumulators + 4 weights

void bf16_dpbf16_strips_decode__avx512_bf16(const strip::PackedStrip& strip, void* decoded);
void bf16_dpbf16_strips_dot_4x6__avx512_bf16(const void* decoded, std::int64_t kblocks,
                                             bool scale_outside, const void* const* x_rows,
                                             int tokens, float* out);
// bf16_dpbf16_strips_decode__avx512_bf16 + bf16_dpbf16_strips_dot_4x6__avx512_bf16 in one pass,
// weights kept in registers (same bits).
void bf16_dpbf16_strips_fused_dot_4x6__avx512_bf16(const strip::PackedStrip& strip,
                                                   const void* const* x_rows, int tokens,
                                                   float* out);

}  // namespace mxmoe::avx512_bf16_kernels
