// aarch64 kernels of the int16 class (int16_kernels.hpp, the numerics of avx2_int16): the
// bf16 -> int16 block quantizer, the 16-row GEMM with smlal (int16 x int16 -> int32) and the
// fused GLU + quantization. Baseline Advanced SIMD only, so every aarch64 server runs it; the
// same bits as the AVX2 kernels: the same integer steps, exact int32 block dots, and the
// epilogue acc = fma(float(dot) * d, 2^(e-128), acc), blocks in order.
#include <arm_neon.h>

#include "backends/integer/int16_kernels.hpp"
#include "backends/integer/kernels/int16_block_scale.hpp"
#include "backends/integer/kernels/int8_neon.hpp"

namespace mxmoe::int16_kernels {
namespace {

// f32 -> bf16 -> f32 bits on 4 floats, as bf16_bits_rne of int16_block32__avx2.cpp: round to
// nearest even on the 16 dropped bits, a NaN becomes the quiet 0x7FC00000.
__attribute__((always_inline)) inline uint32x4_t bf16_bits_rne(float32x4_t v) {
  const uint32x4_t bits = vreinterpretq_u32_f32(v);
  const uint32x4_t odd = vandq_u32(vshrq_n_u32(bits, 16), vdupq_n_u32(1));
  const uint32x4_t biased = vaddq_u32(bits, vaddq_u32(vdupq_n_u32(0x7FFF), odd));
  const uint32x4_t rounded = vandq_u32(biased, vdupq_n_u32(0xFFFF0000u));
  const uint32x4_t nan =
      vcgtq_u32(vandq_u32(bits, vdupq_n_u32(0x7FFFFFFFu)), vdupq_n_u32(0x7F800000u));
  return vbslq_u32(nan, vdupq_n_u32(0x7FC00000u), rounded);
}

// One 32-element block (8 x 4 floats) as defined in int16_kernels.hpp.
void quantize_block(const float32x4_t (&v)[8], std::int16_t* q, float* d, std::int32_t* corr) {
  uint32x4_t b[8];
  // The largest magnitude as integer bits (for non-negative floats the integer order is the
  // float order; Inf and NaN are above every finite value).
  uint32x4_t top = vdupq_n_u32(0);
  for (int i = 0; i < 8; ++i) {
    b[i] = bf16_bits_rne(v[i]);
    top = vmaxq_u32(top, vandq_u32(b[i], vdupq_n_u32(0x7FFFFFFFu)));
  }
  const BlockScale scale = block_scale(vmaxvq_u32(top));
  if (scale.special) {
    for (int i = 0; i < 32; ++i) q[i] = 0;
    *d = scale.d;
    *corr = 0;
    return;
  }
  const float f1 = scale.f1, f2 = scale.f2;
  int32x4_t qi[8];
  int32x4_t sum = vdupq_n_s32(0);
  for (int i = 0; i < 8; ++i) {
    qi[i] = vcvtnq_s32_f32(vmulq_n_f32(vmulq_n_f32(vreinterpretq_f32_u32(b[i]), f1), f2));
    sum = vaddq_s32(sum, qi[i]);
  }
  for (int i = 0; i < 4; ++i)
    vst1q_s16(q + 8 * i, vcombine_s16(vmovn_s32(qi[2 * i]), vmovn_s32(qi[2 * i + 1])));
  *d = scale.d;
  *corr = -12 * vaddvq_s32(sum);
}

// The int32 dots of rows 4c .. 4c+3 of a block for N tokens. Per nibble group h, the decoded
// codes (4 elements of each row) are widened to int16 and multiplied by the token's 4 values
// lane by lane into one accumulator per row; each row's 4 lanes are summed at the end
// (|sum| < 2^25: exact in int32 at every step).
template <std::size_t N>
__attribute__((always_inline)) inline void quad_dots(const std::uint8_t* block, int c,
                                                     std::int64_t k, int8x16_t table,
                                                     const std::int16_t* const (&q)[N],
                                                     int32x4_t (&dot)[N]) {
  int32x4_t rows[N][4];
  for (std::size_t j = 0; j < N; ++j)
    for (int r = 0; r < 4; ++r) rows[j][r] = vdupq_n_s32(0);
  for (int h = 0; h < 4; ++h) {
    const int8_kernels::CodePair w = int8_kernels::decode_codes(block, h, c, table);
    const int16x8_t lo01 = vmovl_s8(vget_low_s8(w.lo)), lo23 = vmovl_high_s8(w.lo);
    const int16x8_t hi01 = vmovl_s8(vget_low_s8(w.hi)), hi23 = vmovl_high_s8(w.hi);
    for (std::size_t j = 0; j < N; ++j) {
      const int16x8_t xs = vld1q_s16(q[j] + k + 8 * h);  // elements 8h .. 8h+7
      const int16x4_t xl = vget_low_s16(xs), xh = vget_high_s16(xs);
      int32x4_t* r = rows[j];
      r[0] = vmlal_s16(r[0], vget_low_s16(lo01), xl);
      r[1] = vmlal_s16(r[1], vget_high_s16(lo01), xl);
      r[2] = vmlal_s16(r[2], vget_low_s16(lo23), xl);
      r[3] = vmlal_s16(r[3], vget_high_s16(lo23), xl);
      r[0] = vmlal_s16(r[0], vget_low_s16(hi01), xh);
      r[1] = vmlal_s16(r[1], vget_high_s16(hi01), xh);
      r[2] = vmlal_s16(r[2], vget_low_s16(hi23), xh);
      r[3] = vmlal_s16(r[3], vget_high_s16(hi23), xh);
    }
  }
  for (std::size_t j = 0; j < N; ++j)
    dot[j] = vpaddq_s32(vpaddq_s32(rows[j][0], rows[j][1]), vpaddq_s32(rows[j][2], rows[j][3]));
}

// The int16 class's epilogue: acc = fma(float(dot) * d_x, 2^(e-128), acc).
__attribute__((always_inline)) inline float32x4_t int16_epilogue(float32x4_t acc, int32x4_t dot,
                                                                 float32x4_t ws, float d) {
  return vfmaq_f32(acc, vmulq_n_f32(vcvtq_f32_s32(dot), d), ws);
}

}  // namespace

void int16_block32_quantize__neon(const float* x, std::int64_t n, std::int16_t* q, float* d,
                                  std::int32_t* corr) noexcept {
  int8_kernels::quantize_blocks_neon(x, n, q, d, corr, &quantize_block);
}

void int16_block32_gemm_16x4__neon(const std::uint8_t* group, int blocks, const QuantRows16& x,
                                   int tokens, float* out, std::int64_t out_stride) noexcept {
  int8_kernels::gemm16_neon<4>(
      group, blocks, x, tokens, out, out_stride,
      [](const std::uint8_t* block, int c, std::int64_t k, int8x16_t table, const auto& q,
         auto& dot) { quad_dots(block, c, k, table, q, dot); },
      &int16_epilogue);
}

void int16_block32_glu_quantize__neon(const float* h, int tokens, const float* gate_bias,
                                      const float* up_bias, const GluParams& p, std::int16_t* q,
                                      float* d, std::int32_t* corr, std::int64_t q_stride,
                                      std::int64_t s_stride) noexcept {
  int8_kernels::glu_quantize_rows_neon(h, tokens, gate_bias, up_bias, p, q, d, corr, q_stride,
                                       s_stride, &quantize_block);
}

}  // namespace mxmoe::int16_kernels
