// AVX-512 VNNI kernels of the int8-activation backends: the per-token quantizer, the
// 16-row GEMM on packed MXFP4 (vpdpbusd) and the fused GLU + requantization.
// GCC 12's AVX-512 intrinsics build "undefined" vectors by self-initialization, which
// -Wuninitialized reports inside the intrinsic headers; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backends/common/simd/glu_avx512.hpp"
#include "backends/integer/int8_kernels.hpp"
#include "backends/integer/kernels/int8_zmm.hpp"

namespace mxmoe::int8_kernels {
namespace {

// vpdpbusd multiplies unsigned by signed bytes: the weights go in as 2*E2M1 + 12 (0..24) and
// the activations as signed int8; the excess 12 * sum(x_q) is removed by starting each block's
// int32 sum at corr = -12 * sum(x_q), computed once per token and block at quantization.
__m512i biased_doubled_code_table() {
  return _mm512_broadcast_i32x4(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
}

// Decoding few tokens streams the weights from DRAM; asking for the block 4 KB (~15 blocks)
// ahead into L2 keeps more misses in flight than the hardware prefetchers alone (measured
// at 1 token, 2 threads: none 15.8 GB/s; into L1: 512 B 17.3, 1 KB 18.9, 2 KB 20.6; into
// L2: 2 KB 21.1, 4 KB 23.0, 8 KB 23.0; docs/perf/BACKENDS_INT8.md). Past a group's end this
// touches the next group, or harmlessly nothing (prefetches never fault).
constexpr std::size_t kPrefetchBytes = 4096;
__attribute__((always_inline)) inline void prefetch_ahead(const std::uint8_t* block) {
  for (std::size_t o = 0; o < group16::kBlockBytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchBytes + o), _MM_HINT_T1);
}

__m512i broadcast_4_bytes(const std::int8_t* p) {
  return _mm512_broadcastd_epi32(_mm_loadu_si32(p));
}

// Rows of the group for N (1..8) tokens t0.. with the accumulators in registers (the token
// loops unrolled, so the arrays stay in registers).
template <int N>
__attribute__((always_inline)) inline void gemm16_tokens(const std::uint8_t* group, int blocks,
                                                         const QuantRows& x, int t0, float* out,
                                                         std::int64_t out_stride) {
  const __m512i table = biased_doubled_code_table();
  const __m512i low_nibble = _mm512_set1_epi8(0x0F);
  __m512 acc[std::size_t{N}];
#pragma GCC unroll 8
  for (int j = 0; j < N; ++j) acc[j] = _mm512_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const std::uint8_t* gb = group + static_cast<std::size_t>(b) * group16::kBlockBytes;
    prefetch_ahead(gb);
    __m512i w[8];
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
      const __m512i packed = _mm512_loadu_si512(gb + 64 * h);
      w[2 * h] = _mm512_shuffle_epi8(table, _mm512_and_si512(packed, low_nibble));
      w[2 * h + 1] =
          _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_nibble));
    }
    const __m512 ws = weight_scales(gb + group16::kNibbleBytes);
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) {
      const std::int64_t row = t0 + j;
      const std::int8_t* xq = x.q + row * x.q_stride + 32 * b;
      // Two independent int32 chains; the sum is exact whatever the grouping.
      __m512i even = _mm512_set1_epi32(x.corr[row * x.s_stride + b]);
      __m512i odd = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int g = 0; g < 8; g += 2) {
        even = _mm512_dpbusd_epi32(even, w[g], broadcast_4_bytes(xq + 4 * g));
        odd = _mm512_dpbusd_epi32(odd, w[g + 1], broadcast_4_bytes(xq + 4 * g + 4));
      }
      const __m512i dot = _mm512_add_epi32(even, odd);
      const __m512 scale = _mm512_mul_ps(ws, _mm512_set1_ps(x.d[row * x.s_stride + b]));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < N; ++j) _mm512_storeu_ps(out + (t0 + j) * out_stride, acc[j]);
}

// One 32-element block of 2 x 16 floats: d = amax/127 (NaN if the block holds a NaN, as the
// definition says: vmaxps alone would drop it), q = RNE(v * (1/d)) in [-127, 127].
void quantize_block(__m512 v0, __m512 v1, std::int8_t* q, float* d, std::int32_t* corr) {
  const bool has_nan =
      (_mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q)) != 0;
  const float amax =
      has_nan ? __builtin_nanf("")
              : _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const float scale = amax / 127.0f;
  const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
  const __m512 inv = _mm512_set1_ps(inverse);
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  // As the definition: clamp(round(y)) == round(clamp(y)) for integer bounds; a NaN product
  // (0 * inf when d is subnormal) gives 0; cvtps rounds to nearest even (MXCSR default).
  const __m512 y0 = _mm512_mul_ps(v0, inv), y1 = _mm512_mul_ps(v1, inv);
  const __mmask16 ok0 = _mm512_cmp_ps_mask(y0, y0, _CMP_ORD_Q);
  const __mmask16 ok1 = _mm512_cmp_ps_mask(y1, y1, _CMP_ORD_Q);
  const __m512i q0 = _mm512_maskz_cvtps_epi32(ok0, _mm512_min_ps(_mm512_max_ps(y0, lo), hi));
  const __m512i q1 = _mm512_maskz_cvtps_epi32(ok1, _mm512_min_ps(_mm512_max_ps(y1, lo), hi));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(q1));
  *d = scale;
  *corr = -12 * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
}

}  // namespace

void int8_block32_quantize__avx512_vnni(const float* x, std::int64_t n, std::int8_t* q, float* d,
                                        std::int32_t* corr) noexcept {
  for (std::int64_t b = 0; b < n / 32; ++b) {
    quantize_block(_mm512_loadu_ps(x + 32 * b), _mm512_loadu_ps(x + 32 * b + 16), q + 32 * b, d + b,
                   corr + b);
  }
}

void int8_block32_gemm_16x8__avx512_vnni(const std::uint8_t* group, int blocks, const QuantRows& x,
                                         int tokens, float* out, std::int64_t out_stride) noexcept {
  int t = 0;
  for (; t + 8 <= tokens; t += 8) gemm16_tokens<8>(group, blocks, x, t, out, out_stride);
  if (t + 4 <= tokens) {
    gemm16_tokens<4>(group, blocks, x, t, out, out_stride);
    t += 4;
  }
  for (; t < tokens; ++t) gemm16_tokens<1>(group, blocks, x, t, out, out_stride);
}

void int8_block32_glu_quantize__avx512_vnni(const float* h, int tokens, const float* gate_bias,
                                            const float* up_bias, const GluParams& p,
                                            std::int8_t* q, float* d, std::int32_t* corr,
                                            std::int64_t q_stride, std::int64_t s_stride) noexcept {
  for (int t = 0; t < tokens; ++t) {
    __m512 a0, a1;
    simd::glu_row32(h + 64 * t, gate_bias, up_bias, p, a0, a1);
    quantize_block(a0, a1, q + t * q_stride, d + t * s_stride, corr + t * s_stride);
  }
}

}  // namespace mxmoe::int8_kernels
