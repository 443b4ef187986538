// What the x86 kernels of dense::Linear share (kernels/avx2, avx512, avx512_vnni): the
// halving tree of the 16 lanes, the sweep of a task's rows in tiles, and the compact kernels'
// token tiles. Include ONLY from kernels/*.cpp compiled with AVX2 flags or more; everything
// here has internal linkage (an unnamed namespace), so objects built with different ISA flags
// never share a body through the linker.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/dense/linear_kernels.hpp"

namespace mxmoe::dense {
namespace {

constexpr std::int64_t I(std::size_t v) noexcept {
  return static_cast<std::int64_t>(v);
}

// The halving tree on lanes 0-7 (lo) and 8-15 (hi): s8 = lo + hi, s4 = s8[0..3] + s8[4..7],
// s2 = s4[0..1] + s4[2..3], s2[0] + s2[1].
float reduce16(__m256 lo, __m256 hi) noexcept {
  const __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#ifdef __AVX512F__
float reduce16(__m512 v) noexcept {
  return reduce16(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
}
#endif

// y = s (+ bias): the class's last step.
void store(float* y, const float* bias, std::int64_t o, float s) noexcept {
  *y = bias != nullptr ? s + bias[o] : s;
}

// Rows [row0, row0 + rows): step(o, R) for R rows at a time, then step(o, 1) for the rest
// (R and 1 as std::integral_constant, for the tile templates).
template <std::size_t R, class Step>
void sweep_rows(std::int64_t row0, std::int64_t rows, Step&& step) noexcept {
  std::int64_t o = row0;
  for (; o + I(R) <= row0 + rows; o += I(R)) step(o, std::integral_constant<std::size_t, R>{});
  for (; o < row0 + rows; ++o) step(o, std::integral_constant<std::size_t, 1>{});
}

// The compact kernels' outer loop: tiles of up to kCompactTokenTile tokens, each quantized
// once on this stack (quantize_x_avx2: the class's rule), then tile(xq, dx, t0, tokens) over
// the task's rows.
template <class Tile>
void compact_token_tiles(const LinearInt8Call& c, Tile&& tile) noexcept {
  const std::int64_t stride = 2 * c.w.pairs();
  alignas(64) std::int8_t xq[kCompactTokenTile * (kCompactMaxIn + 2 * kBlock)];
  float dx[kCompactTokenTile * (kCompactMaxIn / kBlock + 2)];
  for (std::int64_t t0 = 0; t0 < c.tokens; t0 += kCompactTokenTile) {
    const std::int64_t n = std::min<std::int64_t>(kCompactTokenTile, c.tokens - t0);
    for (std::int64_t t = 0; t < n; ++t)
      quantize_x_avx2(c.x + (t0 + t) * c.in, c.in, c.w.pairs(), xq + t * stride * kBlock,
                      dx + t * stride);
    tile(static_cast<const std::int8_t*>(xq), static_cast<const float*>(dx), t0, n);
  }
}

}  // namespace
}  // namespace mxmoe::dense
