// AVX2 + FMA strip kernels. Only plain functions and file-local helpers live here: this file
// is compiled with -mavx2 -mfma -mf16c, and nothing in it may be linked into generic code.
//
// Numerics (avx2_ops.hpp): weights enter as the doubled E2M1 codes (exact small integers in
// float), and the block scale 2^(code-128) multiplies each block's partial sum once per
// token. Per (row, token), over 8 lanes: for each 32-block b in order,
//   p = w[0:8] x[0:8]; p = fma(w[8:16], x[8:16], p); p = fma(w[16:24], .., p);
//   p = fma(w[24:32], .., p); acc = fma(p, scale_b, acc),
// then the 8 lanes are summed in a fixed order. The fused and the decoded paths run exactly
// these operations (block_fma, and decoded_tile's interleaving of it), so they give the same
// bits (tests/backends_float/strip_kernels_test.cpp compares them).
#include <immintrin.h>

#include <cstddef>

#include "backends/float/avx2_ops.hpp"
#include "backends/float/kernels/half_scales.hpp"

namespace mxmoe::avx2_kernels {
namespace {

using strip::kBlockElems;
using strip::kStepNibbleBytes;
using strip::kStripRows;

using strip::kHalfScales;  // kernels/half_scales.hpp

// fp16 bits of the doubled E2M1 values (0, 1, 2, 3, 4, 6, 8, 12 and their negatives) have a
// zero low byte, so one byte-shuffle lookup of the high bytes and an unpack with zeros give
// the fp16 words, and vcvtph2ps turns 8 of them into exact floats. Code 8 (-0) decodes as +0,
// as the integer tables of the other kernels do.
__m256i doubled_code_f16_high_bytes() {
  return _mm256_broadcastsi128_si256(_mm_setr_epi8(0x00, 0x3C, 0x40, 0x42, 0x44, 0x46, 0x48, 0x4A,
                                                   0x00, -0x44, -0x40, -0x3E, -0x3C, -0x3A, -0x38,
                                                   -0x36));
}

// The fp16 words of rows 2 pair and 2 pair + 1 of a step (NibbleOrder::row_blocks: byte j of a
// row = element j | element j+16 << 4): words[q] holds elements 8q..8q+7 of the first row in
// its low 128 bits and of the second row in its high 128 bits.
__attribute__((always_inline)) inline void decode_pair_words(const std::uint8_t* nibbles,
                                                             __m256i table, __m256i (&words)[4]) {
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(nibbles));
  const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(packed, low_nibble));
  const __m256i hi =
      _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibble));
  const __m256i zero = _mm256_setzero_si256();
  words[0] = _mm256_unpacklo_epi8(zero, lo);  // elements 0..7
  words[1] = _mm256_unpackhi_epi8(zero, lo);  // 8..15
  words[2] = _mm256_unpacklo_epi8(zero, hi);  // 16..23
  words[3] = _mm256_unpackhi_epi8(zero, hi);  // 24..31
}

// Row n of a step as 4 x 8 floats, in two ways that give the same values. From registers:
// `words` holds the row's pair (decode_pair_words), n % 2 picks the half (faster on AMD Zen).
// From memory: all 4 rows' words were stored by store_step_words and vcvtph2ps reads them
// (one uop on Intel cores, where the upper half of a register costs a port-5 extract).
__attribute__((always_inline)) inline void row_from_words(const __m256i (&words)[4], int n,
                                                          __m256 (&w)[4]) {
  for (int q = 0; q < 4; ++q)
    w[q] = _mm256_cvtph_ps(n % 2 == 0 ? _mm256_castsi256_si128(words[q])
                                      : _mm256_extracti128_si256(words[q], 1));
}
__attribute__((always_inline)) inline void store_step_words(const std::uint8_t* nibbles,
                                                            __m256i table, std::uint16_t* scratch) {
  for (int pair = 0; pair < 2; ++pair) {
    __m256i words[4];
    decode_pair_words(nibbles + 32 * pair, table, words);
    for (int q = 0; q < 4; ++q)
      _mm256_store_si256(reinterpret_cast<__m256i*>(scratch + 64 * pair + 16 * q), words[q]);
  }
  // Keep the round trip: the compiler would otherwise forward the words in registers.
  __asm__("" : "+m"(*reinterpret_cast<std::uint16_t(*)[128]>(scratch)));
}
__attribute__((always_inline)) inline void row_from_memory(const std::uint16_t* scratch, int n,
                                                           __m256 (&w)[4]) {
  for (int q = 0; q < 4; ++q)
    w[q] = _mm256_cvtph_ps(_mm_load_si128(
        reinterpret_cast<const __m128i*>(scratch + 64 * (n / 2) + 16 * q + 8 * (n % 2))));
}

// The one per-(row, token, block) sequence of the numerics above.
__attribute__((always_inline)) inline __m256 block_fma(const __m256 (&w)[4], const float* x,
                                                       __m256 scale, __m256 acc) {
  __m256 p = _mm256_mul_ps(w[0], _mm256_loadu_ps(x));
  p = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x + 8), p);
  p = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(x + 16), p);
  p = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(x + 24), p);
  return _mm256_fmadd_ps(p, scale, acc);
}

// Sums the 8 lanes in a fixed order (the same for every call).
float horizontal_sum(__m256 v) noexcept {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Decoding streams the strips from DRAM: ask for the nibbles 4 KB ahead (64 steps) into L2,
// as the int8 kernels do (past the strip's end this is the next strip of the expert).
constexpr std::size_t kPrefetchBytes = 4096;

// out[n * T + t] for all rows, each step decoded once into registers.
template <int T, bool kViaMemory>
void fused_tile(const strip::PackedStrip& strip, const float* const* x, float* out) noexcept {
  const __m256i table = doubled_code_f16_high_bytes();
  alignas(32) std::uint16_t scratch[128];
  __m256 acc[kStripRows][static_cast<std::size_t>(T)];
  for (auto& row : acc)
    for (__m256& a : row) a = _mm256_setzero_ps();
  for (std::int64_t kb = 0; kb < strip.kblocks; ++kb) {
    const std::uint8_t* nibbles = strip.nibbles + static_cast<std::size_t>(kb) * kStepNibbleBytes;
    _mm_prefetch(reinterpret_cast<const char*>(nibbles + kPrefetchBytes), _MM_HINT_T1);
    if constexpr (kViaMemory) store_step_words(nibbles, table, scratch);
    __m256i words[4];
#pragma GCC unroll 4
    for (int n = 0; n < kStripRows; ++n) {
      __m256 w[4];
      if constexpr (kViaMemory) {
        row_from_memory(scratch, n, w);
      } else {
        if (n % 2 == 0) decode_pair_words(nibbles + 16 * n, table, words);
        row_from_words(words, n, w);
      }
      const __m256 scale =
          _mm256_broadcast_ss(&kHalfScales.value[strip.scales[kb * kStripRows + n]]);
      for (int t = 0; t < T; ++t)
        acc[n][t] = block_fma(w, x[t] + kb * kBlockElems, scale, acc[n][t]);
    }
  }
  for (int n = 0; n < kStripRows; ++n)
    for (int t = 0; t < T; ++t) out[n * T + t] = horizontal_sum(acc[n][t]);
}

template <bool kViaMemory>
void fused_dot(const strip::PackedStrip& strip, const void* const* x_rows, int tokens,
               float* out) noexcept {
  const float* x[kMaxTokens] = {};
  for (int t = 0; t < tokens; ++t) x[t] = static_cast<const float*>(x_rows[t]);
  if (tokens == 1) {
    fused_tile<1, kViaMemory>(strip, x, out);
  } else {
    fused_tile<2, kViaMemory>(strip, x, out);
  }
}

// All 4 rows of a decoded strip for T tokens. Per block each x vector is loaded once for the 4
// rows and each weight vector once for the T tokens; the 4 x T partials stay in registers and
// the accumulators, touched once per block, may live in L1 (measured against 2-row passes,
// which load x twice: 1.6x faster at 64 tokens, docs/perf/BACKENDS_AVX2.md).
template <int T>
void decoded_tile(const float* w, const float* scales, std::int64_t kblocks, const float* const* x,
                  float* out) noexcept {
  __m256 acc[kStripRows][static_cast<std::size_t>(T)];
  for (auto& row : acc)
    for (__m256& a : row) a = _mm256_setzero_ps();
  for (std::int64_t kb = 0; kb < kblocks; ++kb) {
    // block_fma's operations, interleaved over the 4 x T (row, token) pairs.
    __m256 p[kStripRows][static_cast<std::size_t>(T)];
    for (int q = 0; q < 4; ++q) {
      __m256 xq[static_cast<std::size_t>(T)];
      for (int t = 0; t < T; ++t) xq[t] = _mm256_loadu_ps(x[t] + kb * kBlockElems + 8 * q);
      for (int n = 0; n < kStripRows; ++n) {
        const __m256 wq = _mm256_load_ps(w + (kb * kStripRows + n) * kBlockElems + 8 * q);
        for (int t = 0; t < T; ++t)
          p[n][t] = q == 0 ? _mm256_mul_ps(wq, xq[t]) : _mm256_fmadd_ps(wq, xq[t], p[n][t]);
      }
    }
    for (int n = 0; n < kStripRows; ++n) {
      const __m256 scale = _mm256_broadcast_ss(scales + kb * kStripRows + n);
      for (int t = 0; t < T; ++t) acc[n][t] = _mm256_fmadd_ps(p[n][t], scale, acc[n][t]);
    }
  }
  for (int n = 0; n < kStripRows; ++n)
    for (int t = 0; t < T; ++t) out[n * T + t] = horizontal_sum(acc[n][t]);
}

}  // namespace

void fp32_strips_decode__avx2(const strip::PackedStrip& strip, void* decoded) {
  const __m256i table = doubled_code_f16_high_bytes();
  auto* w = static_cast<float*>(decoded);
  float* scales = w + strip.kblocks * kStripRows * kBlockElems;
  for (std::int64_t kb = 0; kb < strip.kblocks; ++kb) {
    const std::uint8_t* nibbles = strip.nibbles + static_cast<std::size_t>(kb) * kStepNibbleBytes;
    __m256i words[4];
    for (int n = 0; n < kStripRows; ++n) {
      if (n % 2 == 0) decode_pair_words(nibbles + 16 * n, table, words);
      __m256 row[4];
      row_from_words(words, n, row);
      float* dst = w + (kb * kStripRows + n) * kBlockElems;
      for (int q = 0; q < 4; ++q) _mm256_store_ps(dst + 8 * q, row[q]);
      scales[kb * kStripRows + n] = kHalfScales.value[strip.scales[kb * kStripRows + n]];
    }
  }
}

void fp32_strips_dot_4x2__avx2(const void* decoded, std::int64_t kblocks, bool /*scale_outside*/,
                               const void* const* x_rows, int tokens, float* out) {
  const auto* w = static_cast<const float*>(decoded);
  const float* scales = w + kblocks * kStripRows * kBlockElems;
  const float* x[kMaxTokens] = {};
  for (int t = 0; t < tokens; ++t) x[t] = static_cast<const float*>(x_rows[t]);
  if (tokens == 1) {
    decoded_tile<1>(w, scales, kblocks, x, out);
  } else {
    decoded_tile<2>(w, scales, kblocks, x, out);
  }
}

void fp32_strips_fused_dot_4x2__avx2(const strip::PackedStrip& strip, const void* const* x_rows,
                                     int tokens, float* out) {
  fused_dot<false>(strip, x_rows, tokens, out);
}

void fp32_strips_fused_dot_via_memory_4x2__avx2(const strip::PackedStrip& strip,
                                                const void* const* x_rows, int tokens, float* out) {
  fused_dot<true>(strip, x_rows, tokens, out);
}

}  // namespace mxmoe::avx2_kernels
