// The avx2 backend's ISA kernels (kernels/avx2_strip.cpp, compiled with -mavx2 -mfma -mf16c):
// MXFP4 strips decoded to float with the block scale folded in, FMA dot products.
#pragma once

#include <cstdint>

#include "backends/strip/strip_ops.hpp"

namespace mxmoe::avx2_kernels {

inline constexpr int kMaxTokens = 2;  // 4 rows x 2 tokens of ymm accumulators + 4 weights

// Float decode: exact for every scale code (E2M1 x 2^(code-127) is a float32, subnormal for
// the smallest codes), so strips never need the scale outside.
void decode_strip(const strip::PackedStrip& strip, void* decoded);
void dot_strip(const void* decoded, std::int64_t kblocks, bool scale_outside,
               const void* const* x_rows, int tokens, float* out);

}  // namespace mxmoe::avx2_kernels
