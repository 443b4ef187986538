// AVX2 + FMA dense dot products (backends/common/dense_dot.hpp for the order they follow).
// Compiled with -mavx2 -mfma; only plain functions and file-local helpers live here.
#include <immintrin.h>

#include "backends/common/dense_dot.hpp"

namespace mxmoe::dense {
namespace {

// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
float reduce(__m256 v) noexcept {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__m256 load_w(const DenseRows& w, int row, std::int64_t k) noexcept {
  if (w.bf16) {
    const auto* p = static_cast<const std::uint16_t*>(w.w) + row * w.stride + k;
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  }
  return _mm256_loadu_ps(static_cast<const float*>(w.w) + row * w.stride + k);
}

template <std::size_t R, std::size_t T>
void tile(const DenseRows& w, const float* const* x, float* out) noexcept {
  __m256 acc[R][T];
  for (std::size_t n = 0; n < R; ++n)
    for (std::size_t t = 0; t < T; ++t) acc[n][t] = _mm256_setzero_ps();
  for (std::int64_t k = 0; k < w.k; k += kLanes) {
    __m256 wv[R];
    for (std::size_t n = 0; n < R; ++n) wv[n] = load_w(w, static_cast<int>(n), k);
    for (std::size_t t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(x[t] + k);
      for (std::size_t n = 0; n < R; ++n) acc[n][t] = _mm256_fmadd_ps(wv[n], xv, acc[n][t]);
    }
  }
  for (std::size_t n = 0; n < R; ++n)
    for (std::size_t t = 0; t < T; ++t) out[n * T + t] = reduce(acc[n][t]);
}

template <std::size_t R>
void rows_tile(const DenseRows& w, const float* const* x, int tokens, float* out) noexcept {
  switch (tokens) {
    case 1:
      return tile<R, 1>(w, x, out);
    case 2:
      return tile<R, 2>(w, x, out);
    case 3:
      return tile<R, 3>(w, x, out);
    default:
      return tile<R, 4>(w, x, out);
  }
}

}  // namespace

void dense_expert_dot_2x4__avx2(const DenseRows& w, int rows, const float* const* x, int tokens,
                                float* out) noexcept {
  if (rows == 2)
    rows_tile<2>(w, x, tokens, out);
  else
    rows_tile<1>(w, x, tokens, out);
}

}  // namespace mxmoe::dense
