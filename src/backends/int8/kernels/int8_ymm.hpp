// The 16-row int8 GEMM of int8_kernels.hpp on ymm registers, written once for the two ways a
// ymm machine forms exact int32 block dots: vpmaddubsw + vpmaddwd (AVX2) and VEX vpdpbusd
// (AVX-VNNI). Included only by kernels/avx2/ and kernels/avx_vnni/ sources; everything has
// internal linkage, so the two objects (built with different flags) share no body.
//
// Per 8 rows and one token the block dot is the sum over 8 byte vectors w[g] (g = 2h + nibble:
// rows x 4 consecutive elements, as in the packed group) times the token's 4 bytes at 4g. The
// int32 sum is exact in both forms, and the fp32 epilogue is gemm16_vnni's, operation for
// operation: acc = fma(float(dot), 2^(e-128) * d, acc), blocks in order. So the bits equal
// avx512_vnni's and amx_int8's.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "backends/int8/int8_kernels.hpp"

namespace mxmoe::int8_kernels {
namespace {

// vpmaddubsw / vpdpbusd multiply unsigned by signed bytes: weights as 2*E2M1 + 12 (0..24),
// activations as signed int8; the block's int32 sum starts at corr = -12 * sum(x_q).
inline __m256i biased_doubled_code_table_ymm() {
  return _mm256_broadcastsi128_si256(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
}

// 2^(e - 128) for 8 E8M0 bytes, exactly (subnormal for e = 0, 1), as weight_scales() of the
// AVX-512 kernels.
inline __m256 weight_scales_ymm(const std::uint8_t* e8m0) {
  const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e8m0)));
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, one), 23);
  const __m256i subnormal = _mm256_sllv_epi32(one, _mm256_add_epi32(e, _mm256_set1_epi32(21)));
  const __m256i tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, tiny));
}

// vpmaddubsw gives pairs of u8 x s8 products as int16 (|w0 x0 + w1 x1| <= 2 * 24 * 127 = 6096,
// never saturating); four such vectors summed stay within +-24384, so two int16 sums of four
// and one vpmaddwd each (pairs to int32) are exact.
struct MaddubsDot {
  static __m256i block(const __m256i (&w)[8], const __m256i (&x)[8], __m256i corr) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i sum[2];
    for (int s = 0; s < 2; ++s) {
      const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(w[4 * s], x[4 * s]),
                                           _mm256_maddubs_epi16(w[4 * s + 1], x[4 * s + 1]));
      const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(w[4 * s + 2], x[4 * s + 2]),
                                           _mm256_maddubs_epi16(w[4 * s + 3], x[4 * s + 3]));
      sum[s] = _mm256_madd_epi16(_mm256_add_epi16(p01, p23), ones);
    }
    return _mm256_add_epi32(_mm256_add_epi32(sum[0], sum[1]), corr);
  }
};

#ifdef __AVXVNNI__
// VEX vpdpbusd: two independent int32 chains, exact whatever the grouping.
struct VnniDot {
  static __m256i block(const __m256i (&w)[8], const __m256i (&x)[8], __m256i corr) {
    __m256i even = corr, odd = _mm256_setzero_si256();
    for (int g = 0; g < 8; g += 2) {
      even = _mm256_dpbusd_avx_epi32(even, w[g], x[g]);
      odd = _mm256_dpbusd_avx_epi32(odd, w[g + 1], x[g + 1]);
    }
    return _mm256_add_epi32(even, odd);
  }
};
#endif

// As the AVX-512 kernels (measured there, docs/perf/BACKENDS_INT8.md): the block 4 KB ahead
// into L2 keeps enough DRAM reads in flight when decoding streams the weights.
constexpr std::size_t kPrefetchBytesYmm = 4096;
__attribute__((always_inline)) inline void prefetch_ahead_ymm(const std::uint8_t* block) {
  for (std::size_t o = 0; o < kGroupBlockBytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchBytesYmm + o), _MM_HINT_T1);
}

// Rows of the group for N consecutive tokens t0.., blocks in order. The block's 16 decoded
// weight vectors are shared by the N tokens.
template <class Dot, std::size_t N>
__attribute__((always_inline)) inline void gemm16_ymm_tokens(const std::uint8_t* group, int blocks,
                                                             const QuantRows& x, int t0, float* out,
                                                             std::int64_t out_stride) {
  const __m256i table = biased_doubled_code_table_ymm();
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  __m256 acc[N][2];
  for (std::size_t j = 0; j < N; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const std::uint8_t* gb = group + static_cast<std::size_t>(b) * kGroupBlockBytes;
    prefetch_ahead_ymm(gb);
    __m256i w[2][8];  // [rows 0-7 | rows 8-15][2h + nibble]
    for (int h = 0; h < 4; ++h) {
      for (int half = 0; half < 2; ++half) {
        const __m256i packed =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + 64 * h + 32 * half));
        w[half][2 * h] = _mm256_shuffle_epi8(table, _mm256_and_si256(packed, low_nibble));
        w[half][2 * h + 1] =
            _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibble));
      }
    }
    const __m256 ws[2] = {weight_scales_ymm(gb + kGroupNibbleBytes),
                          weight_scales_ymm(gb + kGroupNibbleBytes + 8)};
    for (std::size_t j = 0; j < N; ++j) {
      const std::int64_t row = t0 + static_cast<std::int64_t>(j);
      const std::int8_t* xq = x.q + row * x.q_stride + 32 * b;
      __m256i xb[8];
      for (int g = 0; g < 8; ++g) {
        std::int32_t four;
        __builtin_memcpy(&four, xq + 4 * g, 4);
        xb[g] = _mm256_set1_epi32(four);
      }
      const __m256i corr = _mm256_set1_epi32(x.corr[row * x.s_stride + b]);
      const __m256 d = _mm256_set1_ps(x.d[row * x.s_stride + b]);
      for (int half = 0; half < 2; ++half) {
        const __m256i dot = Dot::block(w[half], xb, corr);
        const __m256 scale = _mm256_mul_ps(ws[half], d);
        acc[j][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[j][half]);
      }
    }
  }
  for (std::size_t j = 0; j < N; ++j) {
    float* dst = out + (t0 + static_cast<std::int64_t>(j)) * out_stride;
    _mm256_storeu_ps(dst, acc[j][0]);
    _mm256_storeu_ps(dst + 8, acc[j][1]);
  }
}

// Token tiles of 4, then one tile of the 1-3 left (each block is decoded once per tile).
template <class Dot>
void gemm16_ymm(const std::uint8_t* group, int blocks, const QuantRows& x, int tokens, float* out,
                std::int64_t out_stride) {
  int t = 0;
  for (; t + 4 <= tokens; t += 4) gemm16_ymm_tokens<Dot, 4>(group, blocks, x, t, out, out_stride);
  switch (tokens - t) {
    case 3:
      gemm16_ymm_tokens<Dot, 3>(group, blocks, x, t, out, out_stride);
      break;
    case 2:
      gemm16_ymm_tokens<Dot, 2>(group, blocks, x, t, out, out_stride);
      break;
    case 1:
      gemm16_ymm_tokens<Dot, 1>(group, blocks, x, t, out, out_stride);
      break;
    default:
      break;
  }
}

}  // namespace
}  // namespace mxmoe::int8_kernels
