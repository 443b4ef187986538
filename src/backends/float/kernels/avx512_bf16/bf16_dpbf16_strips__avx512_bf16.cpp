// AVX-512 BF16 strip kernels. Only plain functions and file-local helpers live here: this
// file is compiled with AVX-512 flags, and nothing in it may be linked into generic code.
// GCC 12's AVX-512 intrinsic headers build some results from deliberately undefined
// vectors (_mm512_undefined_ps), which -Wuninitialized reports; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "backends/float/avx512_bf16_ops.hpp"

namespace mxmoe::avx512_bf16_kernels {
namespace {

using strip::kBlockElems;
using strip::kStripRows;

// bf16 bits of the 16 E2M1 codes (sign-magnitude), repeated so that vpermw, which reads 5
// index bits, ignores bit 4 (the next nibble's lowest bit in the packed words).
constexpr std::uint16_t kE2m1Bf16[32] = {
    0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,  //
    0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0,  //
    0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,  //
    0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0};
// Table entries that are not +-0: only those get the scale's exponent added.
constexpr __mmask32 kNonZeroEntries = 0xFEFEFEFE;

// 2^(code-127) from bits (code 0 is the float32 subnormal 2^-127).
float e8m0_value(std::uint8_t code) noexcept {
  const std::uint32_t bits = code >= 1 ? static_cast<std::uint32_t>(code) << 23 : 0x00400000u;
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// Sums the 16 lanes in a fixed order (the same for every call).
float horizontal_sum(__m512 v) noexcept {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                                  _mm512_castps512_ps256(_mm512_shuffle_f32x4(v, v, 0xEE)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__m512bh as_bf16(__m512i v) noexcept {
  return __builtin_bit_cast(__m512bh, v);
}

// Step kb of the decoded strip: [kStripRows][32] bf16, 64-byte aligned rows.
const std::uint16_t* step_rows(const std::uint16_t* w, std::int64_t kb) noexcept {
  return w + kb * (kStripRows * kBlockElems);
}

// Steps ahead that the fused kernel prefetches (4 KB): far enough to cover DRAM latency at
// the fused kernel's ~10 cycles per step, and still inside L1 when reached.
constexpr std::int64_t kPrefetchSteps = 64;

// Decodes step kb of a packed strip (NibbleOrder::row_words: word j holds element j of rows
// 0..3 in its 4 nibbles) into 4 rows x 32 bf16, the block scale folded into the exponent
// unless kScaleOutside. One vpermw per row; the table repeats the 16 codes, so the index bits
// above bit 3 (the next rows' nibbles) do not matter.
template <bool kScaleOutside>
void decode_step(const strip::PackedStrip& strip, std::int64_t kb, __m512i base,
                 __m512i (&w)[kStripRows]) noexcept {
  const __m512i packed =
      _mm512_loadu_si512(strip.nibbles + static_cast<std::size_t>(kb) * strip::kStepNibbleBytes);
  const __m512i index[kStripRows] = {packed, _mm512_srli_epi16(packed, 4),
                                     _mm512_srli_epi16(packed, 8), _mm512_srli_epi16(packed, 12)};
  for (int n = 0; n < kStripRows; ++n) {
    __m512i table = base;
    if constexpr (!kScaleOutside) {
      const std::uint8_t code = strip.scales[kb * kStripRows + n];
      const auto exponent_delta = static_cast<short>((code - 127) * 128);
      table = _mm512_mask_add_epi16(base, kNonZeroEntries, base, _mm512_set1_epi16(exponent_delta));
    }
    w[n] = _mm512_permutexvar_epi16(index[n], table);
  }
}

// One K step of every (row, token) accumulator. Both the decoded path (dot_tile) and the
// fused path (fused_tile) update accumulators only here, with identical weight values, so a
// (row, token) sum runs the same instructions in the same order whichever path and tile size
// computed it. kScaleOutside: each block's fp32 partial is multiplied by its scale (exact: a
// power of two, and the fp32 FMA handles subnormal scales and results).
template <int T, bool kScaleOutside>
void accumulate_step(__m512 (&acc)[kStripRows][static_cast<std::size_t>(T)],
                     const __m512i (&w)[kStripRows], const std::uint16_t* const* x, std::int64_t kb,
                     const float* step_scales) noexcept {
  for (int t = 0; t < T; ++t) {
    const __m512bh xv = as_bf16(_mm512_loadu_si512(x[t] + kb * kBlockElems));
    for (int n = 0; n < kStripRows; ++n) {
      if constexpr (kScaleOutside) {
        const __m512 partial = _mm512_dpbf16_ps(_mm512_setzero_ps(), as_bf16(w[n]), xv);
        acc[n][t] = _mm512_fmadd_ps(partial, _mm512_set1_ps(step_scales[n]), acc[n][t]);
      } else {
        acc[n][t] = _mm512_dpbf16_ps(acc[n][t], as_bf16(w[n]), xv);
      }
    }
  }
}

template <int T>
void zero(__m512 (&acc)[kStripRows][static_cast<std::size_t>(T)]) noexcept {
  for (int n = 0; n < kStripRows; ++n)
    for (int t = 0; t < T; ++t) acc[n][t] = _mm512_setzero_ps();
}

template <int T>
void reduce(const __m512 (&acc)[kStripRows][static_cast<std::size_t>(T)], float* out) noexcept {
  for (int n = 0; n < kStripRows; ++n)
    for (int t = 0; t < T; ++t) out[n * T + t] = horizontal_sum(acc[n][t]);
}

// Dot products over a strip decoded by bf16_dpbf16_strips_decode__avx512_bf16.
template <int T, bool kScaleOutside>
void dot_tile(const std::uint16_t* w, std::int64_t kblocks, const std::uint16_t* const* x,
              float* out) noexcept {
  const auto* scales = reinterpret_cast<const float*>(w + kblocks * kStripRows * kBlockElems);
  __m512 acc[kStripRows][static_cast<std::size_t>(T)];
  zero<T>(acc);
  for (std::int64_t kb = 0; kb < kblocks; ++kb) {
    const std::uint16_t* ws = step_rows(w, kb);
    __m512i wv[kStripRows];
    for (int n = 0; n < kStripRows; ++n) wv[n] = _mm512_load_si512(ws + n * kBlockElems);
    accumulate_step<T, kScaleOutside>(acc, wv, x, kb, scales + kb * kStripRows);
  }
  reduce<T>(acc, out);
}

// Decode and dot products fused: each step's weights go from the packed nibbles to
// registers and straight into the accumulators, never through memory.
template <int T, bool kScaleOutside>
void fused_tile(const strip::PackedStrip& strip, const std::uint16_t* const* x,
                float* out) noexcept {
  const __m512i base = _mm512_loadu_si512(kE2m1Bf16);
  __m512 acc[kStripRows][static_cast<std::size_t>(T)];
  zero<T>(acc);
  for (std::int64_t kb = 0; kb < strip.kblocks; ++kb) {
    // Past the strip's end this touches the next strip (or nothing: prefetches never fault).
    // Address arithmetic in integers: the prefetched address may lie past the strip.
    const std::uintptr_t ahead =
        reinterpret_cast<std::uintptr_t>(strip.nibbles) +
        static_cast<std::uintptr_t>(kb + kPrefetchSteps) * strip::kStepNibbleBytes;
    _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
    __m512i wv[kStripRows];
    decode_step<kScaleOutside>(strip, kb, base, wv);
    float step_scales[kStripRows] = {};
    if constexpr (kScaleOutside)
      for (int n = 0; n < kStripRows; ++n)
        step_scales[n] = e8m0_value(strip.scales[kb * kStripRows + n]);
    accumulate_step<T, kScaleOutside>(acc, wv, x, kb, step_scales);
  }
  reduce<T>(acc, out);
}

template <int T>
void dot_dispatch(const std::uint16_t* w, std::int64_t kblocks, bool scale_outside,
                  const std::uint16_t* const* x, float* out) noexcept {
  if (scale_outside) {
    dot_tile<T, true>(w, kblocks, x, out);
  } else {
    dot_tile<T, false>(w, kblocks, x, out);
  }
}

template <int T>
void fused_dispatch(const strip::PackedStrip& strip, const std::uint16_t* const* x,
                    float* out) noexcept {
  if (strip.scale_outside) {
    fused_tile<T, true>(strip, x, out);
  } else {
    fused_tile<T, false>(strip, x, out);
  }
}

void bf16_rows(const void* const* x_rows, int tokens, const std::uint16_t** x) noexcept {
  for (int t = 0; t < tokens; ++t) x[t] = static_cast<const std::uint16_t*>(x_rows[t]);
}

}  // namespace

void bf16_dpbf16_strips_decode__avx512_bf16(const strip::PackedStrip& strip, void* decoded) {
  const __m512i base = _mm512_loadu_si512(kE2m1Bf16);
  auto* out = static_cast<std::uint16_t*>(decoded);
  auto* scales = reinterpret_cast<float*>(out + strip.kblocks * kStripRows * kBlockElems);
  for (std::int64_t kb = 0; kb < strip.kblocks; ++kb) {
    __m512i w[kStripRows];
    if (strip.scale_outside) {
      decode_step<true>(strip, kb, base, w);
      for (int n = 0; n < kStripRows; ++n)
        scales[kb * kStripRows + n] = e8m0_value(strip.scales[kb * kStripRows + n]);
    } else {
      decode_step<false>(strip, kb, base, w);
    }
    std::uint16_t* dst = out + kb * (kStripRows * kBlockElems);
    for (int n = 0; n < kStripRows; ++n) _mm512_store_si512(dst + n * kBlockElems, w[n]);
  }
}

void bf16_dpbf16_strips_dot_4x6__avx512_bf16(const void* decoded, std::int64_t kblocks,
                                             bool scale_outside, const void* const* x_rows,
                                             int tokens, float* out) {
  const auto* w = static_cast<const std::uint16_t*>(decoded);
  const std::uint16_t* x[kMaxTokens];
  bf16_rows(x_rows, tokens, x);
  switch (tokens) {
    case 1:
      return dot_dispatch<1>(w, kblocks, scale_outside, x, out);
    case 2:
      return dot_dispatch<2>(w, kblocks, scale_outside, x, out);
    case 3:
      return dot_dispatch<3>(w, kblocks, scale_outside, x, out);
    case 4:
      return dot_dispatch<4>(w, kblocks, scale_outside, x, out);
    case 5:
      return dot_dispatch<5>(w, kblocks, scale_outside, x, out);
    default:
      return dot_dispatch<6>(w, kblocks, scale_outside, x, out);
  }
}

void bf16_dpbf16_strips_fused_dot_4x6__avx512_bf16(const strip::PackedStrip& strip,
                                                   const void* const* x_rows, int tokens,
                                                   float* out) {
  const std::uint16_t* x[kMaxTokens];
  bf16_rows(x_rows, tokens, x);
  switch (tokens) {
    case 1:
      return fused_dispatch<1>(strip, x, out);
    case 2:
      return fused_dispatch<2>(strip, x, out);
    case 3:
      return fused_dispatch<3>(strip, x, out);
    case 4:
      return fused_dispatch<4>(strip, x, out);
    case 5:
      return fused_dispatch<5>(strip, x, out);
    default:
      return fused_dispatch<6>(strip, x, out);
  }
}

}  // namespace mxmoe::avx512_bf16_kernels
