// The avx2 backend's ISA kernels (kernels/avx2/fp32_strips__avx2.cpp, compiled with -mavx2 -mfma
// -mf16c): MXFP4 strips decoded to exact floats (a byte-shuffle lookup of fp16 high bytes, then
// vcvtph2ps), FMA dot products with the block scale applied once per block and token (not per
// element): per (row, token) the 32 products of a block are summed in 8 lanes, then
// acc = fma(partial, 2^(code-128), acc).
#pragma once

#include <cstdint>

#include "backends/float/strip_ops.hpp"

namespace mxmoe::avx2_kernels {

inline constexpr int kMaxTokens = 2;  // 2 rows x 2 tokens x (partial, accumulator) in ymm

// Decodes the unscaled doubled E2M1 codes (exact floats) and the block scales as floats, so
// strips never need PackedStrip::scale_outside.
void fp32_strips_decode__avx2(const strip::PackedStrip& strip, void* decoded);
void fp32_strips_dot_4x2__avx2(const void* decoded, std::int64_t kblocks, bool scale_outside,
                               const void* const* x_rows, int tokens, float* out);
// fp32_strips_decode__avx2 + fp32_strips_dot_4x2__avx2 in one pass over the packed strip (same
// bits). Two forms of the same operations, for the cores where each is faster
// (docs/perf/BACKENDS_AVX2.md): fp16 words converted from registers (AMD Zen), or stored and
// converted from memory (Intel cores, where taking the upper 128 bits of a register costs a port-5
// uop).
void fp32_strips_fused_dot_4x2__avx2(const strip::PackedStrip& strip, const void* const* x_rows,
                                     int tokens, float* out);
void fp32_strips_fused_dot_via_memory_4x2__avx2(const strip::PackedStrip& strip,
                                                const void* const* x_rows, int tokens, float* out);

}  // namespace mxmoe::avx2_kernels
