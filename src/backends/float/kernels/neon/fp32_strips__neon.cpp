// Advanced SIMD strip kernels of the float path (neon_fp32), the aarch64 counterpart of
// kernels/avx2/: the same numerics element for element, so the same bits (tests/conformance,
// NumericsClass). Only plain functions and file-local helpers live here.
//
// Numerics (avx2_ops.hpp): weights enter as the doubled E2M1 codes (exact small integers in
// float), and the block scale 2^(code-128) multiplies each block's partial sum once per token.
// Per (row, token), over 8 lanes (here two float32x4: lanes 0-3 and 4-7): for each 32-block b
// in order,
//   p = w[0:8] x[0:8]; p = fma(w[8:16], x[8:16], p); p = fma(w[16:24], .., p);
//   p = fma(w[24:32], .., p); acc = fma(p, scale_b, acc),
// then the 8 lanes are summed as avx2's horizontal_sum does: a_i = v_i + v_(i+4), then
// (a_0 + a_2) + (a_1 + a_3).
#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

#include "backends/float/kernels/half_scales.hpp"
#include "backends/float/neon_ops.hpp"

namespace mxmoe::neon_kernels {
namespace {

using strip::kBlockElems;
using strip::kHalfScales;
using strip::kStepNibbleBytes;
using strip::kStripRows;

// One row's block as 8 x 4 floats: w[q] holds elements 4q .. 4q+3.
struct RowBlock {
  float32x4_t w[8];
};

// The doubled E2M1 value of each code (code 8, -0, decodes as +0, as in every kernel).
inline int8x16_t doubled_code_table() {
  static constexpr std::int8_t kCodes[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                             0, -1, -2, -3, -4, -6, -8, -12};
  return vld1q_s8(kCodes);
}

// Row n of a step (NibbleOrder::row_blocks: byte j of a row = element j | element j+16 << 4),
// decoded to exact floats.
__attribute__((always_inline)) inline RowBlock decode_row(const std::uint8_t* nibbles, int n,
                                                          int8x16_t table) {
  const uint8x16_t packed = vld1q_u8(nibbles + 16 * n);
  const int8x16_t halves[2] = {vqtbl1q_s8(table, vandq_u8(packed, vdupq_n_u8(0x0F))),
                               vqtbl1q_s8(table, vshrq_n_u8(packed, 4))};  // 0..15, 16..31
  RowBlock r;
  for (int h = 0; h < 2; ++h) {
    const int16x8_t words[2] = {vmovl_s8(vget_low_s8(halves[h])), vmovl_high_s8(halves[h])};
    for (int i = 0; i < 2; ++i) {
      r.w[4 * h + 2 * i] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(words[i])));
      r.w[4 * h + 2 * i + 1] = vcvtq_f32_s32(vmovl_high_s16(words[i]));
    }
  }
  return r;
}

// The 8-lane accumulator of one (row, token) as its two halves.
struct Acc8 {
  float32x4_t lo, hi;
};

// The one per-(row, token, block) sequence of the numerics above: w[0:8] is w[0], w[1].
__attribute__((always_inline)) inline Acc8 block_fma(const float32x4_t (&w)[8], const float* x,
                                                     float32x4_t scale, Acc8 acc) {
  float32x4_t lo = vmulq_f32(w[0], vld1q_f32(x));
  float32x4_t hi = vmulq_f32(w[1], vld1q_f32(x + 4));
  for (int q = 1; q < 4; ++q) {
    lo = vfmaq_f32(lo, w[2 * q], vld1q_f32(x + 8 * q));
    hi = vfmaq_f32(hi, w[2 * q + 1], vld1q_f32(x + 8 * q + 4));
  }
  return {vfmaq_f32(acc.lo, lo, scale), vfmaq_f32(acc.hi, hi, scale)};
}

float horizontal_sum(Acc8 v) {
  const float32x4_t a = vaddq_f32(v.lo, v.hi);
  return (vgetq_lane_f32(a, 0) + vgetq_lane_f32(a, 2)) +
         (vgetq_lane_f32(a, 1) + vgetq_lane_f32(a, 3));
}

// out[n * T + t] for all rows of a strip. Rows are decoded per step from the packed strip
// (fused) or read from a decoded strip: the same values into the same operations.
template <int T, bool kFused>
void strip_tile(const void* source, std::int64_t kblocks, const float* const* x,
                float* out) noexcept {
  const int8x16_t table = doubled_code_table();
  // The source is a PackedStrip (fused) or a decoded strip: its floats, then its scales.
  const strip::PackedStrip* packed = nullptr;
  const float* decoded = nullptr;
  const float* scales = nullptr;
  if constexpr (kFused) {
    packed = static_cast<const strip::PackedStrip*>(source);
  } else {
    decoded = static_cast<const float*>(source);
    scales = decoded + kblocks * kStripRows * kBlockElems;
  }
  Acc8 acc[kStripRows][static_cast<std::size_t>(T)];
  for (auto& row : acc)
    for (Acc8& a : row) a = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  for (std::int64_t kb = 0; kb < kblocks; ++kb) {
    for (int n = 0; n < kStripRows; ++n) {
      RowBlock r;
      float32x4_t scale;
      if constexpr (kFused) {
        r = decode_row(packed->nibbles + static_cast<std::size_t>(kb) * kStepNibbleBytes, n, table);
        scale = vdupq_n_f32(kHalfScales.value[packed->scales[kb * kStripRows + n]]);
      } else {
        const float* w = decoded + (kb * kStripRows + n) * kBlockElems;
        for (int q = 0; q < 8; ++q) r.w[q] = vld1q_f32(w + 4 * q);
        scale = vdupq_n_f32(scales[kb * kStripRows + n]);
      }
      for (int t = 0; t < T; ++t)
        acc[n][t] = block_fma(r.w, x[t] + kb * kBlockElems, scale, acc[n][t]);
    }
  }
  for (int n = 0; n < kStripRows; ++n)
    for (int t = 0; t < T; ++t) out[n * T + t] = horizontal_sum(acc[n][t]);
}

template <bool kFused>
void dot_tokens(const void* source, std::int64_t kblocks, const void* const* x_rows, int tokens,
                float* out) noexcept {
  const float* x[kMaxTokens] = {};
  for (int t = 0; t < tokens; ++t) x[t] = static_cast<const float*>(x_rows[t]);
  if (tokens == 1) {
    strip_tile<1, kFused>(source, kblocks, x, out);
  } else {
    strip_tile<2, kFused>(source, kblocks, x, out);
  }
}

}  // namespace

void fp32_strips_decode__neon(const strip::PackedStrip& strip, void* decoded) {
  const int8x16_t table = doubled_code_table();
  auto* w = static_cast<float*>(decoded);
  float* scales = w + strip.kblocks * kStripRows * kBlockElems;
  for (std::int64_t kb = 0; kb < strip.kblocks; ++kb) {
    const std::uint8_t* nibbles = strip.nibbles + static_cast<std::size_t>(kb) * kStepNibbleBytes;
    for (int n = 0; n < kStripRows; ++n) {
      const RowBlock r = decode_row(nibbles, n, table);
      float* dst = w + (kb * kStripRows + n) * kBlockElems;
      for (int q = 0; q < 8; ++q) vst1q_f32(dst + 4 * q, r.w[q]);
      scales[kb * kStripRows + n] = kHalfScales.value[strip.scales[kb * kStripRows + n]];
    }
  }
}

void fp32_strips_dot_4x2__neon(const void* decoded, std::int64_t kblocks, bool /*scale_outside*/,
                               const void* const* x_rows, int tokens, float* out) {
  dot_tokens<false>(decoded, kblocks, x_rows, tokens, out);
}

void fp32_strips_fused_dot_4x2__neon(const strip::PackedStrip& strip, const void* const* x_rows,
                                     int tokens, float* out) {
  dot_tokens<true>(&strip, strip.kblocks, x_rows, tokens, out);
}

}  // namespace mxmoe::neon_kernels
