// The pieces both aarch64 kernel folders of the integer classes share (kernels/neon/ for
// int16, kernels/neon_dotprod/ for int8): decoding a packed group's codes and scales,
// the token tiling, and the per-token block loops. Every operation is the one int8_ymm.hpp
// and int16_avx2.cpp perform, element for element, so each class's bits are the same on Arm
// as on x86. Included only by those folders' sources; internal linkage, as int8_ymm.hpp.
#pragma once

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

#include "backends/common/simd/glu_neon.hpp"
#include "backends/int8/int8_kernels.hpp"
#include "backends/int8/kernels/token_tiles.hpp"

namespace mxmoe::int8_kernels {
namespace {

// 2 * E2M1 value of each code (0..7 positive, 8..15 negative), signed: sdot and smlal multiply
// signed by signed, so no +12 bias and no correction term are needed (the int32 sums are
// those of the x86 kernels, which add the bias and subtract it again through corr).
inline int8x16_t doubled_code_table_neon() {
  static constexpr std::int8_t kCodes[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  return vld1q_s8(kCodes);
}

// The 16-byte vector c (rows 4c .. 4c+3) of nibble byte group h of a packed block, both
// nibbles decoded: lo holds rows 4c+i's elements 8h+j at byte 4i+j, hi elements 8h+4+j.
struct CodePair {
  int8x16_t lo, hi;
};
__attribute__((always_inline)) inline CodePair decode_codes(const std::uint8_t* block, int h, int c,
                                                            int8x16_t table) {
  const uint8x16_t packed = vld1q_u8(block + 64 * h + 16 * c);
  return {vqtbl1q_s8(table, vandq_u8(packed, vdupq_n_u8(0x0F))),
          vqtbl1q_s8(table, vshrq_n_u8(packed, 4))};
}

// 2^(e - 128) for the block's 16 E8M0 bytes, exactly, as weight_scales_ymm: the float with
// exponent field e, halved, clamped to [2^-128, 2^127]. ws[c] holds rows 4c .. 4c+3.
__attribute__((always_inline)) inline void weight_scales_neon(const std::uint8_t* e8m0,
                                                              float32x4_t (&ws)[4]) {
  const uint8x16_t e = vld1q_u8(e8m0);
  const uint16x8_t e16[2] = {vmovl_u8(vget_low_u8(e)), vmovl_high_u8(e)};
  for (int c = 0; c < 4; ++c) {
    const uint32x4_t e32 = c % 2 == 0 ? vmovl_u16(vget_low_u16(e16[c / 2]))
                                      : vmovl_high_u16(e16[c / 2]);
    const float32x4_t halved =
        vmulq_n_f32(vreinterpretq_f32_u32(vshlq_n_u32(e32, 23)), 0.5f);
    ws[c] = vminq_f32(vmaxq_f32(halved, vdupq_n_f32(0x1p-128f)), vdupq_n_f32(0x1p127f));
  }
}

// The per-token block loop of both quantizers: quantize(v, q, d, corr) takes one 32-element
// block as 8 x 4 floats.
template <class Q, class Quantize>
__attribute__((always_inline)) inline void quantize_blocks_neon(const float* x, std::int64_t n,
                                                                Q* q, float* d, std::int32_t* corr,
                                                                Quantize&& quantize) {
  for (std::int64_t b = 0; b < n / 32; ++b) {
    float32x4_t v[8];
    for (int i = 0; i < 8; ++i) v[i] = vld1q_f32(x + 32 * b + 4 * i);
    quantize(v, q + 32 * b, d + b, corr + b);
  }
}

// h: rows of 64 floats of a GEMM1 tile; each row's 32 GLU results quantized as one block.
template <class Q, class Quantize>
__attribute__((always_inline)) inline void glu_quantize_rows_neon(
    const float* h, int tokens, const float* gate_bias, const float* up_bias, const GluParams& p,
    Q* q, float* d, std::int32_t* corr, std::int64_t q_stride, std::int64_t s_stride,
    Quantize&& quantize) {
  for (int t = 0; t < tokens; ++t) {
    float32x4_t a[8];
    simd::glu_row32(h + 64 * t, gate_bias, up_bias, p, a);
    quantize(a, q + t * q_stride, d + t * s_stride, corr + t * s_stride);
  }
}

}  // namespace
}  // namespace mxmoe::int8_kernels
