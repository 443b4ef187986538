// AVX2 kernels of the avx2_int16 class (int16_kernels.hpp): the bf16 -> int16 block quantizer,
// the 16-row GEMM with vpmaddwd and the fused GLU + quantization.
//
// Why int16 for bf16 activations on AVX2: the avx2 backend's float path spends ~4 float
// operations per weight and token (fp16 lookup, conversion, FMA) and reaches 43% of the DRAM
// bandwidth at 1 token; here a weight costs one unpack and half a vpmaddwd, as the int8 class
// (docs/perf/BACKENDS_AVX2.md has the measurements).
#include <immintrin.h>

#include "backends/integer/int16_kernels.hpp"
#include "backends/integer/kernels/int16_block_scale.hpp"
#include "backends/integer/kernels/int8_ymm.hpp"

namespace mxmoe::int16_kernels {
namespace {

// f32 -> bf16 -> f32 on 8 floats, round to nearest even on the 16 dropped bits (the carry into
// the exponent is right, past the largest finite bf16 it gives Inf). A NaN stays a NaN (the
// quiet 0x7FC00000: its payload does not matter, the whole block becomes NaN): the rounding
// add alone would carry a NaN with a large payload (0x7FFF8000 and up) out of the exponent,
// into -0 or +0 (tests/backends_integer/int16_kernels_test.cpp has such NaNs).
__attribute__((always_inline)) inline __m256i bf16_bits_rne(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i biased = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), odd));
  const __m256i rounded =
      _mm256_and_si256(biased, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF)),
                                         _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC00000), nan);
}

// One 32-element block (4 x 8 floats) as defined in int16_kernels.hpp.
void quantize_block(const __m256 (&v)[4], std::int16_t* q, float* d, std::int32_t* corr) {
  __m256i b[4];
  // The largest magnitude as integer bits: for non-negative floats the integer order is the
  // float order, and Inf/NaN (exponent field all ones) are above every finite value.
  __m256i top = _mm256_setzero_si256();
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF);
  for (int i = 0; i < 4; ++i) {
    b[i] = bf16_bits_rne(v[i]);
    top = _mm256_max_epu32(top, _mm256_and_si256(b[i], magnitude));
  }
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(top), _mm256_extracti128_si256(top, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4E));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xB1));
  const BlockScale scale = block_scale(static_cast<unsigned>(_mm_cvtsi128_si32(m)));
  if (scale.special) {
    for (int i = 0; i < 32; ++i) q[i] = 0;
    *d = scale.d;
    *corr = 0;
    return;
  }
  // q = RNE(b * 2^(14-e)) (vcvtps2dq, RNE) through the two exact products.
  const __m256 f1 = _mm256_set1_ps(scale.f1), f2 = _mm256_set1_ps(scale.f2);
  __m256i qi[4];
  __m256i sum = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i) {
    qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_mul_ps(_mm256_castsi256_ps(b[i]), f1), f2));
    sum = _mm256_add_epi32(sum, qi[i]);
  }
  // int32 -> int16 (the values fit): the pack interleaves the 128-bit lanes, vpermq undoes it.
  for (int i = 0; i < 2; ++i) {
    const __m256i words =
        _mm256_permute4x64_epi64(_mm256_packs_epi32(qi[2 * i], qi[2 * i + 1]), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 16 * i), words);
  }
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  *d = scale.d;
  *corr = -12 * _mm_cvtsi128_si32(s);
}

// The packed group's weight vector g = 2h + nibble of a row half (int8_ymm.hpp's decode:
// byte 4i + j = row i's element 4g + j, as 2c + 12) widened to int16: `lo` holds rows 0, 1
// (lane 0) and 4, 5 (lane 1), `hi` rows 2, 3 and 6, 7; each dword is two consecutive elements
// of one row (4g + 0, 1 or 4g + 2, 3).
struct Words {
  __m256i lo, hi;
};
__attribute__((always_inline)) inline Words widen(__m256i bytes) {
  const __m256i zero = _mm256_setzero_si256();
  return {_mm256_unpacklo_epi8(bytes, zero), _mm256_unpackhi_epi8(bytes, zero)};
}

// The int32 block dots of the 8 rows of a half for one token: per g, the token's 4 values at
// 4g (one qword in every lane) times both word vectors by vpmaddwd (|pair| <= 2 * 24 * 32767,
// the block's sums stay below 2^25: exact); then vphaddd adds each row's two dwords, which
// puts rows 0..7 in lanes 0..7, and corr removes the +12 bias.
template <class W>
__attribute__((always_inline)) inline __m256i block_dot(W&& words, const std::int16_t* x,
                                                        std::int32_t corr) {
  __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
  for (int g = 0; g < 8; ++g) {
    std::int64_t four;
    __builtin_memcpy(&four, x + 4 * g, 8);
    const __m256i xg = _mm256_set1_epi64x(four);
    const Words w = words(g);
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(w.lo, xg));
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(w.hi, xg));
  }
  return _mm256_add_epi32(_mm256_hadd_epi32(lo, hi), _mm256_set1_epi32(corr));
}

// Rows of the group for N consecutive tokens t0.., blocks in order (int8_ymm.hpp's tiling:
// one token decodes each vector where it is used; several share the block's 32 word vectors).
template <std::size_t N>
__attribute__((always_inline)) inline void gemm16_tokens(const std::uint8_t* group, int blocks,
                                                         const QuantRows16& x, int t0, float* out,
                                                         std::int64_t out_stride) {
  using namespace int8_kernels;
  const __m256i table = biased_doubled_code_table_ymm();
  __m256 acc[N][2];
  for (std::size_t j = 0; j < N; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const std::uint8_t* gb = group + static_cast<std::size_t>(b) * group16::kBlockBytes;
    prefetch_ahead_ymm(gb);
    const __m256 ws[2] = {weight_scales_ymm(gb + group16::kNibbleBytes),
                          weight_scales_ymm(gb + group16::kNibbleBytes + 8)};
    // Stored and loaded whole (full-width stores, then loads of the same width): an array of
    // Words left to the compiler was spilled in 128-bit halves and reloaded as 256-bit
    // vectors, a failed store forward per load (8 tokens 4x slower than the float path).
    alignas(32) std::int16_t decoded[N > 1 ? 2 : 1][8][2][16];
    if constexpr (N > 1) {
      for (int half = 0; half < 2; ++half)
        for (int g = 0; g < 8; ++g) {
          const Words w = widen(decode_weights(gb, half, g, table));
          _mm256_store_si256(reinterpret_cast<__m256i*>(decoded[half][g][0]), w.lo);
          _mm256_store_si256(reinterpret_cast<__m256i*>(decoded[half][g][1]), w.hi);
        }
    }
    for (std::size_t j = 0; j < N; ++j) {
      const std::int64_t row = t0 + static_cast<std::int64_t>(j);
      const std::int16_t* xb = x.q + row * x.q_stride + 32 * b;
      const std::int32_t corr = x.corr[row * x.s_stride + b];
      const __m256 d = _mm256_set1_ps(x.d[row * x.s_stride + b]);
      for (int half = 0; half < 2; ++half) {
        const auto words = [&](int g) {
          if constexpr (N > 1)
            return Words{_mm256_load_si256(reinterpret_cast<const __m256i*>(decoded[half][g][0])),
                         _mm256_load_si256(reinterpret_cast<const __m256i*>(decoded[half][g][1]))};
          return widen(decode_weights(gb, half, g, table));
        };
        const __m256i dot = block_dot(words, xb, corr);
        acc[j][half] =
            _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(dot), d), ws[half], acc[j][half]);
      }
    }
  }
  for (std::size_t j = 0; j < N; ++j) {
    float* dst = out + (t0 + static_cast<std::int64_t>(j)) * out_stride;
    _mm256_storeu_ps(dst, acc[j][0]);
    _mm256_storeu_ps(dst + 8, acc[j][1]);
  }
}

}  // namespace

void int16_block32_quantize__avx2(const float* x, std::int64_t n, std::int16_t* q, float* d,
                                  std::int32_t* corr) noexcept {
  int8_kernels::quantize_blocks_ymm(x, n, q, d, corr, &quantize_block);
}

void int16_block32_gemm_16x8__avx2(const std::uint8_t* group, int blocks, const QuantRows16& x,
                                   int tokens, float* out, std::int64_t out_stride) noexcept {
  int8_kernels::for_token_tiles<8>(tokens, [&]<std::size_t N>(int t0) {
    gemm16_tokens<N>(group, blocks, x, t0, out, out_stride);
  });
}

void int16_block32_glu_quantize__avx2(const float* h, int tokens, const float* gate_bias,
                                      const float* up_bias, const GluParams& p, std::int16_t* q,
                                      float* d, std::int32_t* corr, std::int64_t q_stride,
                                      std::int64_t s_stride) noexcept {
  int8_kernels::glu_quantize_rows_ymm(h, tokens, gate_bias, up_bias, p, q, d, corr, q_stride,
                                      s_stride, &quantize_block);
}

}  // namespace mxmoe::int16_kernels
