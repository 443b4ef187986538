// The neon_fp32 backend's ISA kernels (kernels/neon/fp32_strips__neon.cpp, compiled for Advanced
// SIMD): the avx2 backend's float path on aarch64, with its bits (avx2_ops.hpp has the
// numerics). MXFP4 strips decoded to exact floats (a table lookup of the doubled E2M1 codes,
// widened and converted), FMA dot products with the block scale applied once per block and
// token.
#pragma once

#include <cstdint>

#include "backends/float/strip_ops.hpp"

namespace mxmoe::neon_kernels {

inline constexpr int kMaxTokens = 2;  // 4 rows x 2 tokens x 8-lane accumulators in 32 registers

// Decodes the unscaled doubled E2M1 codes (exact floats) and the block scales as floats, so
// strips never need PackedStrip::scale_outside.
void fp32_strips_decode__neon(const strip::PackedStrip& strip, void* decoded);
void fp32_strips_dot_4x2__neon(const void* decoded, std::int64_t kblocks, bool scale_outside,
                               const void* const* x_rows, int tokens, float* out);
// fp32_strips_decode__neon + fp32_strips_dot_4x2__neon in one pass over the packed strip (same
// bits).
void fp32_strips_fused_dot_4x2__neon(const strip::PackedStrip& strip, const void* const* x_rows,
                                     int tokens, float* out);

}  // namespace mxmoe::neon_kernels
