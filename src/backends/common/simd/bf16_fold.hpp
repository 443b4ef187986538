// When an MXFP4 block scale (E8M0 code e) can be folded into bf16 weights exactly: the one
// rule of the bf16 backends (avx512_bf16's strips, amx_bf16's groups). Plain constexpr data
// and comparisons, safe to include from portable and ISA sources alike (internal linkage).
//
// Folding adds e - 127 to the exponent of each E2M1 value (0.5 .. 6). It is exact while the
// results are normal bf16 numbers, but vdpbf16ps and TDPBF16PS also treat subnormal inputs
// and results as zero, so weights near 2^-126 would lose whole blocks. Folding is used only
// when the smallest scaled element, 0.5 x 2^(e-127), is at least 2^-64 (then only products
// with activations below 2^-62 can flush, each under 2^-126 in magnitude) and the largest,
// 6 x 2^(e-127), stays finite in bf16. Other blocks keep the scale outside, in fp32.
#pragma once

#include <cstdint>

namespace mxmoe::simd {
namespace {

inline constexpr int kMinFoldableScale = 64;
inline constexpr int kMaxFoldableScale = 250;

constexpr bool bf16_scale_foldable(std::uint8_t e8m0) noexcept {
  return e8m0 >= kMinFoldableScale && e8m0 <= kMaxFoldableScale;
}

}  // namespace
}  // namespace mxmoe::simd
