// AVX2 + FMA strip kernels. Only plain functions and file-local helpers live here: this file
// is compiled with -mavx2 -mfma, and nothing in it may be linked into generic code.
#include <immintrin.h>

#include <cstring>

#include "backends/strip/avx2_ops.hpp"

namespace mxmoe::avx2_kernels {
namespace {

using strip::kBlockElems;
using strip::kStripRows;

// 2^(code-128): the E8M0 scale halved, because the table below holds doubled E2M1 values.
// Built from bits (codes 0 and 1 give the float32 subnormals 2^-128 and 2^-127).
float half_scale(std::uint8_t code) noexcept {
  const std::uint32_t bits =
      code >= 2 ? static_cast<std::uint32_t>(code - 1) << 23 : 0x00200000u << code;
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// Sums the 8 lanes in a fixed order (the same for every call).
float horizontal_sum(__m256 v) noexcept {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int T>
void dot_tile(const float* w, std::int64_t kblocks, const float* const* x, float* out) noexcept {
  __m256 acc[kStripRows][static_cast<std::size_t>(T)];
  for (int n = 0; n < kStripRows; ++n)
    for (int t = 0; t < T; ++t) acc[n][t] = _mm256_setzero_ps();
  const std::int64_t groups = kblocks * (kBlockElems / 8);
  for (std::int64_t g = 0; g < groups; ++g) {
    // Step kb = g / 4 holds [4 rows][32]; group g covers elements 8*(g%4).. of each row.
    const float* wg = w + (g / 4) * (kStripRows * kBlockElems) + (g % 4) * 8;
    __m256 wv[kStripRows];
    for (int n = 0; n < kStripRows; ++n) wv[n] = _mm256_load_ps(wg + n * kBlockElems);
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(x[t] + g * 8);
      for (int n = 0; n < kStripRows; ++n) acc[n][t] = _mm256_fmadd_ps(wv[n], xv, acc[n][t]);
    }
  }
  for (int n = 0; n < kStripRows; ++n)
    for (int t = 0; t < T; ++t) out[n * T + t] = horizontal_sum(acc[n][t]);
}

}  // namespace

void decode_strip(const strip::PackedStrip& strip, void* decoded) {
  // Doubled E2M1 values (sign-magnitude codes 0..15) as int8: exact small integers.
  const __m128i table = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i low_nibbles = _mm_set1_epi8(0x0F);
  auto* out = static_cast<float*>(decoded);
  for (std::int64_t kb = 0; kb < strip.kblocks; ++kb) {
    for (int n = 0; n < kStripRows; ++n) {
      const auto step = static_cast<std::size_t>(kb) * strip::kStepNibbleBytes;
      const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(
          strip.nibbles + step + static_cast<std::size_t>(16 * n)));
      // Elements 0..15 are the low nibbles, 16..31 the high ones (NibbleOrder::row_blocks).
      const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(packed, low_nibbles));
      const __m128i hi =
          _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(packed, 4), low_nibbles));
      const __m256 scale = _mm256_set1_ps(half_scale(strip.scales[kb * kStripRows + n]));
      float* dst = out + (kb * kStripRows + n) * kBlockElems;
      const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
      for (int q = 0; q < 4; ++q) {
        const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[q]));
        _mm256_store_ps(dst + 8 * q, _mm256_mul_ps(v, scale));  // exact: a power of two
      }
    }
  }
}

void dot_strip(const void* decoded, std::int64_t kblocks, bool /*scale_outside*/,
               const void* const* x_rows, int tokens, float* out) {
  const auto* w = static_cast<const float*>(decoded);
  const float* x[kMaxTokens];
  for (int t = 0; t < tokens; ++t) x[t] = static_cast<const float*>(x_rows[t]);
  if (tokens == 1) {
    dot_tile<1>(w, kblocks, x, out);
  } else {
    dot_tile<2>(w, kblocks, x, out);
  }
}

}  // namespace mxmoe::avx2_kernels
