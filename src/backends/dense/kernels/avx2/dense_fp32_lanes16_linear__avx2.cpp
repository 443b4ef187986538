// dense_fp32_lanes16 on AVX2 + FMA (linear_kernels.hpp for the order): the 16 lanes of one
// (row, token) sum are two ymm, lanes 0-7 and 8-15; a tile of R rows x T tokens widens each
// row's bf16 once per step. Compiled with the flags of the `avx2` set.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/dense/lanes16_x86.hpp"

namespace mxmoe::dense {
namespace {

__m256 widen(__m128i bf16) noexcept {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16), 16));
}

__m256 load_w(const LinearF32Call& c, std::int64_t row, std::int64_t k) noexcept {
  if (c.bf16) {
    const auto* p = static_cast<const std::uint16_t*>(c.w) + row * c.in + k;
    return widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  return _mm256_loadu_ps(static_cast<const float*>(c.w) + row * c.in + k);
}

// The last in % 16 elements of a row as 16 floats, zero past the end.
void tail_w(const LinearF32Call& c, std::int64_t row, std::int64_t k, float* out) noexcept {
  const std::int64_t n = c.in - k;
  std::memset(out, 0, sizeof(float) * kLinearLanes);
  if (c.bf16) {
    const auto* p = static_cast<const std::uint16_t*>(c.w) + row * c.in + k;
    alignas(16) std::uint16_t bits[kLinearLanes] = {};
    std::memcpy(bits, p, static_cast<std::size_t>(n) * 2);
    _mm256_storeu_ps(out, widen(_mm_load_si128(reinterpret_cast<const __m128i*>(bits))));
    _mm256_storeu_ps(out + 8, widen(_mm_load_si128(reinterpret_cast<const __m128i*>(bits + 8))));
    return;
  }
  std::memcpy(out, static_cast<const float*>(c.w) + row * c.in + k,
              static_cast<std::size_t>(n) * sizeof(float));
}

template <std::size_t R, std::size_t T>
void tile(const LinearF32Call& c, std::int64_t o, std::int64_t t0) noexcept {
  __m256 lo[R][T], hi[R][T];
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t) lo[r][t] = hi[r][t] = _mm256_setzero_ps();
  const float* x = c.x + t0 * c.in;
  const std::int64_t full = c.in / kLinearLanes * kLinearLanes;
  for (std::int64_t k = 0; k < full; k += kLinearLanes) {
    __m256 w[R];
    for (std::size_t r = 0; r < R; ++r) w[r] = load_w(c, o + I(r), k);
    for (std::size_t t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + I(t) * c.in + k);
      for (std::size_t r = 0; r < R; ++r) lo[r][t] = _mm256_fmadd_ps(w[r], xv, lo[r][t]);
    }
    for (std::size_t r = 0; r < R; ++r) w[r] = load_w(c, o + I(r), k + 8);
    for (std::size_t t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + I(t) * c.in + k + 8);
      for (std::size_t r = 0; r < R; ++r) hi[r][t] = _mm256_fmadd_ps(w[r], xv, hi[r][t]);
    }
  }
  if (full < c.in) {  // lanes past `in` keep their sums (blend, not a zero product)
    alignas(32) float wt[kLinearLanes], xt[kLinearLanes];
    alignas(32) std::int32_t keep[kLinearLanes];
    for (int l = 0; l < kLinearLanes; ++l) keep[l] = full + l < c.in ? -1 : 0;
    const __m256 m_lo = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<__m256i*>(keep)));
    const __m256 m_hi =
        _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<__m256i*>(keep + 8)));
    for (std::size_t r = 0; r < R; ++r) {
      tail_w(c, o + I(r), full, wt);
      for (std::size_t t = 0; t < T; ++t) {
        std::memset(xt, 0, sizeof xt);
        std::memcpy(xt, x + I(t) * c.in + full,
                    static_cast<std::size_t>(c.in - full) * sizeof(float));
        lo[r][t] = _mm256_blendv_ps(
            lo[r][t], _mm256_fmadd_ps(_mm256_load_ps(wt), _mm256_load_ps(xt), lo[r][t]), m_lo);
        hi[r][t] = _mm256_blendv_ps(
            hi[r][t], _mm256_fmadd_ps(_mm256_load_ps(wt + 8), _mm256_load_ps(xt + 8), hi[r][t]),
            m_hi);
      }
    }
  }
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t) {
      store(c.y + (t0 + I(t)) * c.y_stride + o + I(r), c.bias, o + I(r),
            reduce16(lo[r][t], hi[r][t]));
    }
}

template <std::size_t R, std::size_t T>
void sweep(const LinearF32Call& c, std::int64_t row0, std::int64_t rows, std::int64_t t0) noexcept {
  sweep_rows<R>(row0, rows, [&](std::int64_t o, auto r) { tile<decltype(r)::value, T>(c, o, t0); });
}

}  // namespace

void dense_fp32_lanes16_linear__avx2(const LinearF32Call& c, std::int64_t row0,
                                     std::int64_t rows) noexcept {
  // 16 registers: 4 rows x 1 token, or 2 rows x 2-3 tokens (two sums each); more than 3
  // tokens: every tile over a block of rows held in L2 before the next block.
  const auto tiles = [&](std::int64_t r0, std::int64_t n) {
    for (std::int64_t t0 = 0; t0 < c.tokens; t0 += 3) {
      switch (std::min<std::int64_t>(3, c.tokens - t0)) {
        case 1:
          sweep<4, 1>(c, r0, n, t0);
          break;
        case 2:
          sweep<2, 2>(c, r0, n, t0);
          break;
        default:
          sweep<2, 3>(c, r0, n, t0);
          break;
      }
    }
  };
  if (c.tokens <= 3) return tiles(row0, rows);
  row_blocks(row0, rows, c.in * (c.bf16 ? 2 : 4), tiles);
}

}  // namespace mxmoe::dense
