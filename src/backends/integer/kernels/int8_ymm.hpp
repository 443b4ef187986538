// The 16-row int8 GEMM of int8_kernels.hpp on ymm registers, written once for the two ways a
// ymm machine forms exact int32 block dots: vpmaddubsw + vpmaddwd (AVX2) and VEX vpdpbusd
// (AVX-VNNI). Included only by kernels/avx2/ and kernels/avx_vnni/ sources; everything has
// internal linkage, so the two objects (built with different flags) share no body.
//
// Per 8 rows and one token the block dot is the sum over 8 byte vectors w[g] (g = 2h + nibble:
// rows x 4 consecutive elements, as in the packed group) times the token's 4 bytes at 4g. The
// int32 sum is exact in both forms, and the fp32 epilogue is int8_block32_gemm_16x8__avx512_vnni's,
// operation for operation: acc = fma(float(dot), 2^(e-128) * d, acc), blocks in order. So the bits
// equal avx512_vnni's and amx_int8's.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "backends/common/simd/glu_avx2.hpp"
#include "backends/integer/int8_kernels.hpp"
#include "backends/integer/kernels/token_tiles.hpp"

namespace mxmoe::int8_kernels {
namespace {

// vpmaddubsw / vpdpbusd multiply unsigned by signed bytes: weights as 2*E2M1 + 12 (0..24),
// activations as signed int8; the block's int32 sum starts at corr = -12 * sum(x_q).
inline __m256i biased_doubled_code_table_ymm() {
  return _mm256_broadcastsi128_si256(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
}

// 2^(e - 128) for 8 E8M0 bytes, exactly, as weight_scales() of the AVX-512 kernels (e = 0, 1
// give the subnormals 2^-128, 2^-127; e = 255 gives 2^127): the float with exponent field e,
// halved (exact, also into the subnormal 2^-127 for e = 1), then clamped to [2^-128, 2^127],
// which fixes e = 0 (bits 0: +0) and e = 255 (bits of +Inf) and nothing else.
inline __m256 weight_scales_ymm(const std::uint8_t* e8m0) {
  const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e8m0)));
  const __m256 halved =
      _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(e, 23)), _mm256_set1_ps(0.5f));
  return _mm256_min_ps(_mm256_max_ps(halved, _mm256_set1_ps(0x1p-128f)), _mm256_set1_ps(0x1p127f));
}

// vpmaddubsw gives pairs of u8 x s8 products as int16 (|w0 x0 + w1 x1| <= 2 * 24 * 127 = 6096,
// never saturating); four such vectors summed stay within +-24384, so two int16 sums of four
// and one vpmaddwd each (pairs to int32) are exact. w(half, g) and x(g) give the weight vector
// g of a row half (decoded on the fly, or loaded) and the token's 4 bytes at 4g; dot[half]
// starts at corr. Each x(g) serves both halves.
struct MaddubsDot {
  template <class W, class X>
  __attribute__((always_inline)) static void block(W&& w, X&& x, __m256i corr, __m256i (&dot)[2]) {
    const __m256i ones = _mm256_set1_epi16(1);
    dot[0] = dot[1] = corr;
    for (int s = 0; s < 2; ++s) {
      const __m256i x0 = x(4 * s);
      __m256i sum[2] = {_mm256_maddubs_epi16(w(0, 4 * s), x0),
                        _mm256_maddubs_epi16(w(1, 4 * s), x0)};
      for (int g = 4 * s + 1; g < 4 * s + 4; ++g) {
        const __m256i xg = x(g);
        for (int half = 0; half < 2; ++half)
          sum[half] = _mm256_add_epi16(sum[half], _mm256_maddubs_epi16(w(half, g), xg));
      }
      for (int half = 0; half < 2; ++half)
        dot[half] = _mm256_add_epi32(dot[half], _mm256_madd_epi16(sum[half], ones));
    }
  }
};

#ifdef __AVXVNNI__
// VEX vpdpbusd accumulates straight into int32 (exact whatever the order): two chains per row
// half (even and odd g), so one token has four independent chains in flight.
struct VnniDot {
  template <class W, class X>
  __attribute__((always_inline)) static void block(W&& w, X&& x, __m256i corr, __m256i (&dot)[2]) {
    __m256i even[2] = {corr, corr}, odd[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int g = 0; g < 8; g += 2) {
      const __m256i x0 = x(g), x1 = x(g + 1);
      for (int half = 0; half < 2; ++half) {
        even[half] = _mm256_dpbusd_avx_epi32(even[half], w(half, g), x0);
        odd[half] = _mm256_dpbusd_avx_epi32(odd[half], w(half, g + 1), x1);
      }
    }
    for (int half = 0; half < 2; ++half) dot[half] = _mm256_add_epi32(even[half], odd[half]);
  }
};
#endif

// As the AVX-512 kernels (measured there, docs/perf/BACKENDS_INT8.md): the block 4 KB ahead
// into L2 keeps enough DRAM reads in flight when decoding streams the weights.
constexpr std::size_t kPrefetchBytesYmm = 4096;
__attribute__((always_inline)) inline void prefetch_ahead_ymm(const std::uint8_t* block) {
  for (std::size_t o = 0; o < group16::kBlockBytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchBytesYmm + o), _MM_HINT_T1);
}

// Weight vector g = 2h + nibble of row half `half` (rows 8 half .. 8 half + 7) of a block.
__attribute__((always_inline)) inline __m256i decode_weights(const std::uint8_t* block, int half,
                                                             int g, __m256i table) {
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  __m256i packed =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 64 * (g / 2) + 32 * half));
  if (g % 2 == 1) packed = _mm256_srli_epi16(packed, 4);
  return _mm256_shuffle_epi8(table, _mm256_and_si256(packed, low_nibble));
}

// Token `row`'s 4 activation bytes at 4g of block b, in every int32 lane.
__attribute__((always_inline)) inline __m256i activation_bytes(const QuantRows& x, std::int64_t row,
                                                               int b, int g) {
  std::int32_t four;
  __builtin_memcpy(&four, x.q + row * x.q_stride + 32 * b + 4 * g, 4);
  return _mm256_set1_epi32(four);
}

// The fp32 epilogue of int8_block32_gemm_16x8__avx512_vnni for one row half: acc = fma(float(dot),
// ws * d, acc).
__attribute__((always_inline)) inline __m256 accumulate(__m256i dot, __m256 ws, float d,
                                                        __m256 acc) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(ws, _mm256_set1_ps(d)), acc);
}

// Rows of the group for N consecutive tokens t0.., blocks in order. One token: each weight
// vector is decoded right where it is used (few registers live). Several: the block's 16
// decoded vectors are kept (in a stack buffer where registers run out) and shared.
template <class Dot, std::size_t N>
__attribute__((always_inline)) inline void gemm16_ymm_tokens(const std::uint8_t* group, int blocks,
                                                             const QuantRows& x, int t0, float* out,
                                                             std::int64_t out_stride) {
  const __m256i table = biased_doubled_code_table_ymm();
  __m256 acc[N][2];
  for (std::size_t j = 0; j < N; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const std::uint8_t* gb = group + static_cast<std::size_t>(b) * group16::kBlockBytes;
    prefetch_ahead_ymm(gb);
    const __m256 ws[2] = {weight_scales_ymm(gb + group16::kNibbleBytes),
                          weight_scales_ymm(gb + group16::kNibbleBytes + 8)};
    __m256i decoded[2][8];
    if constexpr (N > 1) {
      for (int half = 0; half < 2; ++half)
        for (int g = 0; g < 8; ++g) decoded[half][g] = decode_weights(gb, half, g, table);
    }
    for (std::size_t j = 0; j < N; ++j) {
      const std::int64_t row = t0 + static_cast<std::int64_t>(j);
      const auto weights = [&](int half, int g) {
        if constexpr (N > 1) return decoded[half][g];
        return decode_weights(gb, half, g, table);
      };
      const auto activations = [&](int g) { return activation_bytes(x, row, b, g); };
      __m256i dot[2];
      Dot::block(weights, activations, _mm256_set1_epi32(x.corr[row * x.s_stride + b]), dot);
      const float d = x.d[row * x.s_stride + b];
      for (int half = 0; half < 2; ++half)
        acc[j][half] = accumulate(dot[half], ws[half], d, acc[j][half]);
    }
  }
  for (std::size_t j = 0; j < N; ++j) {
    float* dst = out + (t0 + static_cast<std::int64_t>(j)) * out_stride;
    _mm256_storeu_ps(dst, acc[j][0]);
    _mm256_storeu_ps(dst + 8, acc[j][1]);
  }
}

// Token tiles of 8 and 4, then one tile of the 1-3 left (token_tiles.hpp; 8 rather than 4:
// 5.4 against 6.8 ns per token and block, docs/perf/BACKENDS_AVX2.md).
template <class Dot>
void gemm16_ymm(const std::uint8_t* group, int blocks, const QuantRows& x, int tokens, float* out,
                std::int64_t out_stride) {
  for_token_tiles<8>(tokens, [&]<std::size_t N>(int t0) {
    gemm16_ymm_tokens<Dot, N>(group, blocks, x, t0, out, out_stride);
  });
}

// The per-token block loops of both ymm quantizers (int8 and int16): quantize(v, q, d, corr)
// takes one 32-element block as 4 x 8 floats.
template <class Q, class Quantize>
__attribute__((always_inline)) inline void quantize_blocks_ymm(const float* x, std::int64_t n,
                                                               Q* q, float* d, std::int32_t* corr,
                                                               Quantize&& quantize) {
  for (std::int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    const __m256 v[4] = {_mm256_loadu_ps(xb), _mm256_loadu_ps(xb + 8), _mm256_loadu_ps(xb + 16),
                         _mm256_loadu_ps(xb + 24)};
    quantize(v, q + 32 * b, d + b, corr + b);
  }
}
// h: rows of 64 floats of a GEMM1 tile; each row's 32 GLU results quantized as one block.
template <class Q, class Quantize>
__attribute__((always_inline)) inline void glu_quantize_rows_ymm(
    const float* h, int tokens, const float* gate_bias, const float* up_bias, const GluParams& p,
    Q* q, float* d, std::int32_t* corr, std::int64_t q_stride, std::int64_t s_stride,
    Quantize&& quantize) {
  for (int t = 0; t < tokens; ++t) {
    __m256 a[4];
    simd::glu_row32(h + 64 * t, gate_bias, up_bias, p, a);
    quantize(a, q + t * q_stride, d + t * s_stride, corr + t * s_stride);
  }
}

}  // namespace
}  // namespace mxmoe::int8_kernels
