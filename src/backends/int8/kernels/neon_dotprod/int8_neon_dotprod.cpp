// aarch64 kernels of the int8-activation numerics class (int8_kernels.hpp): the per-token
// quantizer, the 16-row GEMM with sdot (Armv8.2 dot product, by lane) and the fused GLU +
// requantization. Each gives the bits of its AVX-512 counterpart: the same quantizer
// arithmetic, exact int32 block dots, and the epilogue acc = fma(float(dot), 2^(e-128) * d,
// acc), blocks in order.
#include <arm_neon.h>

#include "backends/int8/int8_kernels.hpp"
#include "backends/int8/kernels/int8_neon.hpp"

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

// sdot by lane: the 4 rows' dots of one decoded vector with the token's 4 bytes at lane L of x.
template <int L>
__attribute__((always_inline)) inline int32x4_t dot_lane(int32x4_t acc, int8x16_t w, int8x16_t x) {
  return vdotq_laneq_s32(acc, w, x, L);
}

// Nibble group h of a block for N tokens: its elements 8h .. 8h+7 are bytes 4 (2h%4) .. of
// the token's first (h < 2) or second 16 bytes.
template <int H, std::size_t N>
__attribute__((always_inline)) inline void block_group(const std::uint8_t* block, int8x16_t table,
                                                       const int8x16_t (&x)[N][2],
                                                       int32x4_t (&dot)[N][4]) {
  for (int c = 0; c < 4; ++c) {
    const CodePair w = decode_codes(block, H, c, table);
    for (std::size_t j = 0; j < N; ++j) {
      dot[j][c] = dot_lane<2 * (H % 2)>(dot[j][c], w.lo, x[j][H / 2]);
      dot[j][c] = dot_lane<2 * (H % 2) + 1>(dot[j][c], w.hi, x[j][H / 2]);
    }
  }
}

template <std::size_t N>
__attribute__((always_inline)) inline void gemm16_tokens(const std::uint8_t* group, int blocks,
                                                         const QuantRows& x, int t0, float* out,
                                                         std::int64_t out_stride) {
  const int8x16_t table = doubled_code_table_neon();
  float32x4_t acc[N][4];
  for (std::size_t j = 0; j < N; ++j)
    for (int c = 0; c < 4; ++c) acc[j][c] = vdupq_n_f32(0.0f);
  for (int b = 0; b < blocks; ++b) {
    const std::uint8_t* gb = group + static_cast<std::size_t>(b) * kGroupBlockBytes;
    float32x4_t ws[4];
    weight_scales_neon(gb + kGroupNibbleBytes, ws);
    int8x16_t xv[N][2];
    int32x4_t dot[N][4];
    for (std::size_t j = 0; j < N; ++j) {
      const std::int8_t* xb = x.q + (t0 + static_cast<std::int64_t>(j)) * x.q_stride + 32 * b;
      xv[j][0] = vld1q_s8(xb);
      xv[j][1] = vld1q_s8(xb + 16);
      for (int c = 0; c < 4; ++c) dot[j][c] = vdupq_n_s32(0);
    }
    block_group<0>(gb, table, xv, dot);
    block_group<1>(gb, table, xv, dot);
    block_group<2>(gb, table, xv, dot);
    block_group<3>(gb, table, xv, dot);
    for (std::size_t j = 0; j < N; ++j) {
      const float d = x.d[(t0 + static_cast<std::int64_t>(j)) * x.s_stride + b];
      for (int c = 0; c < 4; ++c)
        acc[j][c] = vfmaq_f32(acc[j][c], vcvtq_f32_s32(dot[j][c]), vmulq_n_f32(ws[c], d));
    }
  }
  for (std::size_t j = 0; j < N; ++j) {
    float* dst = out + (t0 + static_cast<std::int64_t>(j)) * out_stride;
    for (int c = 0; c < 4; ++c) vst1q_f32(dst + 4 * c, acc[j][c]);
  }
}

}  // namespace

void quantize_int8_neon(const float* x, std::int64_t n, std::int8_t* q, float* d,
                        std::int32_t* corr) noexcept {
  quantize_blocks_neon(x, n, q, d, corr, &quantize_block);
}

void gemm16_neon_dotprod(const std::uint8_t* group, int blocks, const QuantRows& x, int tokens,
                         float* out, std::int64_t out_stride) noexcept {
  for_token_tiles<4>(tokens, [&]<std::size_t N>(int t0) {
    gemm16_tokens<N>(group, blocks, x, t0, out, out_stride);
  });
}

void glu_quantize_neon(const float* h, int tokens, const float* gate_bias, const float* up_bias,
                       const GluParams& p, std::int8_t* q, float* d, std::int32_t* corr,
                       std::int64_t q_stride, std::int64_t s_stride) noexcept {
  glu_quantize_rows_neon(h, tokens, gate_bias, up_bias, p, q, d, corr, q_stride, s_stride,
                         &quantize_block);
}

}  // namespace mxmoe::int8_kernels
