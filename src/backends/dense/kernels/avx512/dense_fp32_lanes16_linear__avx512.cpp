// dense_fp32_lanes16 on AVX-512 (linear_kernels.hpp for the order): one zmm is the 16 lanes of
// one (row, token) sum; a tile of R rows x T tokens widens each row's bf16 once per step and
// uses it for every token of the tile. Compiled with the flags of the `avx512` set.
// GCC 12's AVX-512 intrinsics build "undefined" vectors by self-initialization, which
// -Wuninitialized reports inside the intrinsic headers; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "backends/dense/lanes16_x86.hpp"

namespace mxmoe::dense {
namespace {

__m512 load_w(const LinearF32Call& c, std::int64_t row, std::int64_t k) noexcept {
  if (c.bf16) {
    const auto* p = static_cast<const std::uint16_t*>(c.w) + row * c.in + k;
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  return _mm512_loadu_ps(static_cast<const float*>(c.w) + row * c.in + k);
}

__m512 load_w_tail(const LinearF32Call& c, std::int64_t row, std::int64_t k, __mmask16 m) noexcept {
  if (c.bf16) {
    const auto* p = static_cast<const std::uint16_t*>(c.w) + row * c.in + k;
    const __m256i bits = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  return _mm512_maskz_loadu_ps(m, static_cast<const float*>(c.w) + row * c.in + k);
}

// Rows [o, o + R) x tokens [t0, t0 + T).
template <std::size_t R, std::size_t T>
void tile(const LinearF32Call& c, std::int64_t o, std::int64_t t0) noexcept {
  __m512 acc[R][T];
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const float* x = c.x + t0 * c.in;
  const std::int64_t full = c.in / kLinearLanes * kLinearLanes;
  for (std::int64_t k = 0; k < full; k += kLinearLanes) {
    __m512 w[R];
    for (std::size_t r = 0; r < R; ++r) w[r] = load_w(c, o + I(r), k);
    for (std::size_t t = 0; t < T; ++t) {
      const __m512 xv = _mm512_loadu_ps(x + I(t) * c.in + k);
      for (std::size_t r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  if (full < c.in) {  // masked: lanes past `in` keep their sums
    const auto m = static_cast<__mmask16>((1u << (c.in - full)) - 1);
    __m512 w[R];
    for (std::size_t r = 0; r < R; ++r) w[r] = load_w_tail(c, o + I(r), full, m);
    for (std::size_t t = 0; t < T; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + I(t) * c.in + full);
      for (std::size_t r = 0; r < R; ++r) acc[r][t] = _mm512_mask3_fmadd_ps(w[r], xv, acc[r][t], m);
    }
  }
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t) {
      store(c.y + (t0 + I(t)) * c.y_stride + o + I(r), c.bias, o + I(r), reduce16(acc[r][t]));
    }
}

// A token tile of `tokens` (1..8) from t0 over rows [row0, row0 + rows).
void token_tile(const LinearF32Call& c, std::int64_t row0, std::int64_t rows, std::int64_t t0,
                std::int64_t tokens) noexcept {
  zmm_sum_tiles(tokens, [&]<std::size_t R, std::size_t T>() {
    sweep_rows<R>(row0, rows,
                  [&](std::int64_t o, auto r) { tile<decltype(r)::value, T>(c, o, t0); });
  });
}

}  // namespace

void dense_fp32_lanes16_linear__avx512(const LinearF32Call& c, std::int64_t row0,
                                       std::int64_t rows) noexcept {
  // Up to 8 tokens: one tile, so the weights are read once. More: tiles of 6 tokens (4 x 6
  // registers of sums), every tile over a block of rows held in L2 before the next block.
  if (c.tokens <= 8) return token_tile(c, row0, rows, 0, c.tokens);
  row_blocks(row0, rows, c.in * (c.bf16 ? 2 : 4), [&](std::int64_t r0, std::int64_t n) {
    for (std::int64_t t0 = 0; t0 < c.tokens; t0 += 6)
      token_tile(c, r0, n, t0, std::min<std::int64_t>(6, c.tokens - t0));
  });
}

}  // namespace mxmoe::dense
