// The pieces the aarch64 Advanced SIMD kernel folders of the integer classes share
// (kernels/neon/ for int16, kernels/neon_dotprod/ and kernels/neon_i8mm/ for int8): decoding
// a packed group's codes and scales, the GEMM skeleton, and the per-token block loops. Every
// operation is the one int8_ymm.hpp and int16_block32__avx2.cpp perform, element for element, so
// each class's bits are the same on Arm as on x86. Included only by those folders' sources;
// internal linkage, as int8_ymm.hpp.
#pragma once

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

#include "backends/common/simd/glu_neon.hpp"
#include "backends/integer/int8_kernels.hpp"
#include "backends/integer/kernels/token_tiles.hpp"

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

// 2^(e - 128) for rows 4c .. 4c+3 (their 4 E8M0 bytes), exactly, as weight_scales_ymm: the
// float with exponent field e, halved, clamped to [2^-128, 2^127].
__attribute__((always_inline)) inline float32x4_t weight_scales_quad_neon(const std::uint8_t* e8m0) {
  std::uint32_t bytes;
  __builtin_memcpy(&bytes, e8m0, sizeof bytes);
  const uint32x4_t e32 = vmovl_u16(vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(bytes)))));
  const float32x4_t halved = vmulq_n_f32(vreinterpretq_f32_u32(vshlq_n_u32(e32, 23)), 0.5f);
  return vminq_f32(vmaxq_f32(halved, vdupq_n_f32(0x1p-128f)), vdupq_n_f32(0x1p127f));
}

// The 16-row GEMM skeleton of every NEON kernel of both classes, for N (1..4) tokens from t0:
// rows 4c .. 4c+3 (one float32x4 of outputs per token) outer, the blocks inner, so a tile
// holds N accumulators, not 4N (the 32 vector registers then keep the decoded codes and the
// tokens' values: no spills). A pass over c re-reads its 64 nibble bytes of each block, which
// the first pass brought into L1 (a group is 272 bytes a block, 24 KB at K = 2880).
//   dots(block, c, k, q, dot): dot[j] = exact int32 dots of rows 4c .. 4c+3 with token j's
//                              elements k .. k+31 (q[j] + k);
//   epilogue(acc, dot, ws, d): the class's scale-and-accumulate of one block (int8_kernels.hpp,
//                              int16_kernels.hpp), blocks in order.
template <std::size_t N, class Q, class Dots, class Epilogue>
__attribute__((always_inline)) inline void gemm16_row_quads(const std::uint8_t* group, int blocks,
                                                            const QuantRowsOf<Q>& x, int t0,
                                                            float* out, std::int64_t out_stride,
                                                            Dots&& dots, Epilogue&& epilogue) {
  const Q* q[N];
  const float* d[N];
  for (std::size_t j = 0; j < N; ++j) {
    const std::int64_t t = t0 + static_cast<std::int64_t>(j);
    q[j] = x.q + t * x.q_stride;
    d[j] = x.d + t * x.s_stride;
  }
  for (int c = 0; c < 4; ++c) {
    float32x4_t acc[N];
    for (float32x4_t& a : acc) a = vdupq_n_f32(0.0f);
    for (int b = 0; b < blocks; ++b) {
      const std::uint8_t* gb = group + static_cast<std::size_t>(b) * group16::kBlockBytes;
      const float32x4_t ws = weight_scales_quad_neon(gb + group16::kNibbleBytes + 4 * c);
      int32x4_t dot[N];
      dots(gb, c, std::int64_t{32} * b, q, dot);
      for (std::size_t j = 0; j < N; ++j) acc[j] = epilogue(acc[j], dot[j], ws, d[j][b]);
    }
    for (std::size_t j = 0; j < N; ++j)
      vst1q_f32(out + (t0 + static_cast<std::int64_t>(j)) * out_stride + 4 * c, acc[j]);
  }
}

// A whole NEON GEMM: tiles of up to Largest tokens (token_tiles.hpp) on the row-quad skeleton.
// quad_dots(block, c, k, table, q, dot) is the kernel's dots of gemm16_row_quads, given the
// code table.
template <std::size_t Largest, class Q, class QuadDots, class Epilogue>
__attribute__((always_inline)) inline void gemm16_neon(const std::uint8_t* group, int blocks,
                                                       const QuantRowsOf<Q>& x, int tokens,
                                                       float* out, std::int64_t out_stride,
                                                       QuadDots quad_dots, Epilogue epilogue) {
  const int8x16_t table = doubled_code_table_neon();
  for_token_tiles<Largest>(tokens, [&]<std::size_t N>(int t0) {
    gemm16_row_quads<N>(
        group, blocks, x, t0, out, out_stride,
        [&](const std::uint8_t* block, int c, std::int64_t k, const Q* const (&q)[N],
            int32x4_t (&dot)[N]) { quad_dots(block, c, k, table, q, dot); },
        epilogue);
  });
}

// The int8 class's epilogue: acc = fma(float(dot), d_x * 2^(e-128), acc).
__attribute__((always_inline)) inline float32x4_t int8_epilogue_neon(float32x4_t acc,
                                                                     int32x4_t dot,
                                                                     float32x4_t ws, float d) {
  return vfmaq_f32(acc, vcvtq_f32_s32(dot), vmulq_n_f32(ws, d));
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
