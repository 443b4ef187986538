// aarch64 kernels of the int8-activation numerics class (int8_kernels.hpp): the per-token
// quantizer, the 16-row GEMM with sdot (Armv8.2 dot product, by lane; on the skeleton of
// int8_neon.hpp) and the fused GLU + requantization. Each gives the bits of its AVX-512
// counterpart: the same quantizer arithmetic, exact int32 block dots, and the epilogue
// acc = fma(float(dot), 2^(e-128) * d, acc), blocks in order.
#include <arm_neon.h>

#include "backends/integer/int8_kernels.hpp"
#include "backends/integer/kernels/int8_neon.hpp"

namespace mxmoe::int8_kernels {
namespace {

// One 32-element block of 8 x 4 floats with the arithmetic of quantize_int8_block32:
// d = amax/127 (NaN if the block holds a NaN), q = RNE(v * (1/d)) clamped to [-127, 127],
// 0 where v * (1/d) is NaN.
void quantize_block(const float32x4_t (&v)[8], std::int8_t* q, float* d, std::int32_t* corr) {
  float32x4_t amax4 = vdupq_n_f32(0.0f);
  uint32x4_t nan4 = vdupq_n_u32(0);
  for (const float32x4_t& x : v) {
    amax4 = vmaxq_f32(amax4, vabsq_f32(x));
    nan4 = vorrq_u32(nan4, vmvnq_u32(vceqq_f32(x, x)));
  }
  const float amax = vmaxvq_u32(nan4) != 0 ? __builtin_nanf("") : vmaxvq_f32(amax4);
  const float scale = amax / 127.0f;
  const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
  const float32x4_t lo = vdupq_n_f32(-127.0f), hi = vdupq_n_f32(127.0f);
  int32x4_t qi[8];
  int32x4_t sum = vdupq_n_s32(0);
  for (int i = 0; i < 8; ++i) {
    const float32x4_t y = vmulq_n_f32(v[i], inverse);
    const uint32x4_t ok = vceqq_f32(y, y);
    const int32x4_t r = vcvtnq_s32_f32(vminq_f32(vmaxq_f32(y, lo), hi));  // ties to even
    qi[i] = vreinterpretq_s32_u32(vandq_u32(ok, vreinterpretq_u32_s32(r)));
    sum = vaddq_s32(sum, qi[i]);
  }
  for (int i = 0; i < 2; ++i) {
    const int16x8_t w0 = vcombine_s16(vmovn_s32(qi[4 * i]), vmovn_s32(qi[4 * i + 1]));
    const int16x8_t w1 = vcombine_s16(vmovn_s32(qi[4 * i + 2]), vmovn_s32(qi[4 * i + 3]));
    vst1q_s8(q + 16 * i, vcombine_s8(vmovn_s16(w0), vmovn_s16(w1)));
  }
  *d = scale;
  *corr = -12 * vaddvq_s32(sum);
}

// Rows 4c .. 4c+3 of a block against N tokens, sdot by lane: nibble group h's elements
// 8h .. 8h+7 are the token's 4-byte lanes 2(h%2) (low nibbles) and 2(h%2)+1 (high) of its
// half h/2.
template <int H, std::size_t N>
__attribute__((always_inline)) inline void group_dots(CodePair w, const int8x16_t (&x)[N][2],
                                                      int32x4_t (&dot)[N]) {
  for (std::size_t j = 0; j < N; ++j) {
    dot[j] = vdotq_laneq_s32(dot[j], w.lo, x[j][H / 2], 2 * (H % 2));
    dot[j] = vdotq_laneq_s32(dot[j], w.hi, x[j][H / 2], 2 * (H % 2) + 1);
  }
}

template <std::size_t N>
__attribute__((always_inline)) inline void quad_dots(const std::uint8_t* block, int c,
                                                     std::int64_t k, int8x16_t table,
                                                     const std::int8_t* const (&q)[N],
                                                     int32x4_t (&dot)[N]) {
  int8x16_t xv[N][2];
  for (std::size_t j = 0; j < N; ++j) {
    xv[j][0] = vld1q_s8(q[j] + k);
    xv[j][1] = vld1q_s8(q[j] + k + 16);
    dot[j] = vdupq_n_s32(0);
  }
  group_dots<0>(decode_codes(block, 0, c, table), xv, dot);
  group_dots<1>(decode_codes(block, 1, c, table), xv, dot);
  group_dots<2>(decode_codes(block, 2, c, table), xv, dot);
  group_dots<3>(decode_codes(block, 3, c, table), xv, dot);
}

}  // namespace

void int8_block32_quantize__neon_dotprod(const float* x, std::int64_t n, std::int8_t* q, float* d,
                                         std::int32_t* corr) noexcept {
  quantize_blocks_neon(x, n, q, d, corr, &quantize_block);
}

void int8_block32_gemm_16x4__neon_dotprod(const std::uint8_t* group, int blocks, const QuantRows& x,
                                          int tokens, float* out,
                                          std::int64_t out_stride) noexcept {
  gemm16_neon<4>(
      group, blocks, x, tokens, out, out_stride,
      [](const std::uint8_t* block, int c, std::int64_t k, int8x16_t table, const auto& q,
         auto& dot) { quad_dots(block, c, k, table, q, dot); },
      &int8_epilogue_neon);
}

void int8_block32_glu_quantize__neon_dotprod(const float* h, int tokens, const float* gate_bias,
                                             const float* up_bias, const GluParams& p,
                                             std::int8_t* q, float* d, std::int32_t* corr,
                                             std::int64_t q_stride,
                                             std::int64_t s_stride) noexcept {
  glu_quantize_rows_neon(h, tokens, gate_bias, up_bias, p, q, d, corr, q_stride, s_stride,
                         &quantize_block);
}

}  // namespace mxmoe::int8_kernels
