// AVX2 kernels of the int8-activation numerics class (int8_kernels.hpp): the per-token
// quantizer, the 16-row GEMM with vpmaddubsw + vpmaddwd (int8_ymm.hpp) and the fused GLU +
// requantization. Each gives the bits of its AVX-512 counterpart.
#include <immintrin.h>

#include "backends/integer/int8_kernels.hpp"
#include "backends/integer/kernels/int8_ymm.hpp"

namespace mxmoe::int8_kernels {
namespace {

// One 32-element block of 4 x 8 floats with the arithmetic of quantize_int8_block32:
// d = amax/127 (NaN if the block holds a NaN), q = RNE(v * (1/d)) clamped to [-127, 127],
// 0 where v * (1/d) is NaN.
void quantize_block(const __m256 (&v)[4], std::int8_t* q, float* d, std::int32_t* corr) {
  const __m256 magnitude_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 amax8 = _mm256_setzero_ps();
  __m256 nan8 = _mm256_setzero_ps();
  for (const __m256& x : v) {
    amax8 = _mm256_max_ps(amax8, _mm256_and_ps(x, magnitude_mask));
    nan8 = _mm256_or_ps(nan8, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float amax = _mm256_movemask_ps(nan8) != 0 ? __builtin_nanf("") : _mm_cvtss_f32(m);
  const float scale = amax / 127.0f;
  const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
  const __m256 inv = _mm256_set1_ps(inverse);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  __m256i qi[4];
  __m256i sum = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i) {
    const __m256 y = _mm256_mul_ps(v[i], inv);
    const __m256i ok = _mm256_castps_si256(_mm256_cmp_ps(y, y, _CMP_ORD_Q));
    qi[i] = _mm256_and_si256(ok, _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(y, lo), hi)));
    sum = _mm256_add_epi32(sum, qi[i]);
  }
  // int32 -> int8 (the values fit): packs interleave the 128-bit lanes, the permute undoes it.
  const __m256i words =
      _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
  const __m256i bytes =
      _mm256_permutevar8x32_epi32(words, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), bytes);
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  *d = scale;
  *corr = -12 * _mm_cvtsi128_si32(s);
}

}  // namespace

void int8_block32_quantize__avx2(const float* x, std::int64_t n, std::int8_t* q, float* d,
                                 std::int32_t* corr) noexcept {
  quantize_blocks_ymm(x, n, q, d, corr, &quantize_block);
}

void int8_block32_gemm_16x8__avx2(const std::uint8_t* group, int blocks, const QuantRows& x,
                                  int tokens, float* out, std::int64_t out_stride) noexcept {
  gemm16_ymm<MaddubsDot>(group, blocks, x, tokens, out, out_stride);
}

void int8_block32_glu_quantize__avx2(const float* h, int tokens, const float* gate_bias,
                                     const float* up_bias, const GluParams& p, std::int8_t* q,
                                     float* d, std::int32_t* corr, std::int64_t q_stride,
                                     std::int64_t s_stride) noexcept {
  glu_quantize_rows_ymm(h, tokens, gate_bias, up_bias, p, q, d, corr, q_stride, s_stride,
                        &quantize_block);
}

}  // namespace mxmoe::int8_kernels
