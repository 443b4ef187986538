// The int8 class's 16-row GEMM with SVE, vector-length agnostic: the same code at 128 bits
// (Graviton 4, Grace), 256 (Graviton 3), 512 (A64FX) and up to 2048. A vector holds
// VL/128 segments of 16 bytes, and SVE's sdot by lane works in each segment with its own copy of
// the token's 4 bytes (svld1rq replicates a quadword in every segment), so one instruction does
// the 4 rows of each segment: VL/32 rows. The 16 rows of a group go in chunks of
// min(VL/32, 16) rows, each chunk's accumulators whole over the blocks; a predicate keeps a
// vector longer than 16 rows (VL > 512 bits) to its group. Block dots are exact int32 sums and
// the epilogue is int8_block32_gemm_16x4__neon_dotprod's, element for element, so every vector
// length gives the int8 class's bits (int8_kernels.hpp). The quantizer and the GLU are the
// neon_dotprod folder's.
#include <arm_sve.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backends/integer/int8_kernels.hpp"
#include "backends/integer/kernels/token_tiles.hpp"

namespace mxmoe::int8_kernels {
namespace {

// The 2 * E2M1 values of the 16 codes, signed (int8_neon.hpp's table), in every segment.
inline svint8_t doubled_code_table_sve() {
  static constexpr std::int8_t kCodes[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                             0, -1, -2, -3, -4, -6, -8, -12};
  return svld1rq_s8(svptrue_b8(), kCodes);
}

// Nibble group h of the chunk's rows against one token: bytes 64h + 4i + j of the block hold
// row i's elements 8h+j (low nibble) and 8h+4+j (high), which are bytes 8(h%2)+j and
// 8(h%2)+4+j of the token's half h/2 (x_lo: elements 0-15, x_hi: 16-31, each in every
// segment): its 4-byte lanes 2(h%2) and 2(h%2)+1.
template <int H>
__attribute__((always_inline)) inline svint32_t dot_group(svint32_t acc, svint8_t lo, svint8_t hi,
                                                          svint8_t x_lo, svint8_t x_hi) {
  const svint8_t half = H / 2 == 0 ? x_lo : x_hi;
  acc = svdot_lane_s32(acc, lo, half, 2 * (H % 2));
  return svdot_lane_s32(acc, hi, half, 2 * (H % 2) + 1);
}

// The chunk's 4 bytes a row of nibble group h, both nibbles decoded.
__attribute__((always_inline)) inline svint8_t decode_lo(svuint8_t packed, svint8_t table) {
  return svtbl_s8(table, svand_n_u8_x(svptrue_b8(), packed, 0x0F));
}
__attribute__((always_inline)) inline svint8_t decode_hi(svuint8_t packed, svint8_t table) {
  return svtbl_s8(table, svlsr_n_u8_x(svptrue_b8(), packed, 4));
}

// Nibble group H of the chunk (its bytes from `nibbles`) against the N tokens' dots.
template <int H, std::size_t N>
__attribute__((always_inline)) inline void group_dots(const std::uint8_t* nibbles, svbool_t bytes,
                                                      svint8_t table, svint8_t xl0, svint8_t xh0,
                                                      svint8_t xl1, svint8_t xh1, svint8_t xl2,
                                                      svint8_t xh2, svint8_t xl3, svint8_t xh3,
                                                      svint32_t& dot0, svint32_t& dot1,
                                                      svint32_t& dot2, svint32_t& dot3) {
  const svuint8_t packed = svld1_u8(bytes, nibbles + 64 * H);
  const svint8_t lo = decode_lo(packed, table), hi = decode_hi(packed, table);
  dot0 = dot_group<H>(dot0, lo, hi, xl0, xh0);
  if constexpr (N > 1) dot1 = dot_group<H>(dot1, lo, hi, xl1, xh1);
  if constexpr (N > 2) dot2 = dot_group<H>(dot2, lo, hi, xl2, xh2);
  if constexpr (N > 3) dot3 = dot_group<H>(dot3, lo, hi, xl3, xh3);
}

// acc = fma(float(dot), 2^(e-128) * d, acc): svmla is the fused multiply-add of vfmaq_f32.
__attribute__((always_inline)) inline svfloat32_t epilogue(svbool_t lanes, svfloat32_t acc,
                                                           svint32_t dot, svfloat32_t ws, float d) {
  return svmla_f32_x(lanes, acc, svcvt_f32_s32_x(lanes, dot), svmul_n_f32_x(lanes, ws, d));
}

// Rows r0 .. r0+rows-1 of the group for N (1..4) tokens from t0. Sizeless SVE types cannot be
// array or class members (nor captured), hence one named variable per token.
template <std::size_t N>
__attribute__((always_inline)) inline void chunk_tokens(const std::uint8_t* group, int blocks,
                                                        const QuantRows& x, int t0, int r0,
                                                        int rows, float* out,
                                                        std::int64_t out_stride) {
  static_assert(N >= 1 && N <= 4);
  const svbool_t bytes = svwhilelt_b8(0, 4 * rows);  // the chunk's 4 bytes a row, per group h
  const svbool_t lanes = svwhilelt_b32(0, rows);
  const svbool_t all = svptrue_b8();
  const svint8_t table = doubled_code_table_sve();
  const std::int8_t* q[4];
  const float* d[4];
  for (std::size_t j = 0; j < 4; ++j) {
    const std::int64_t t = t0 + static_cast<std::int64_t>(std::min(j, N - 1));
    q[j] = x.q + t * x.q_stride;
    d[j] = x.d + t * x.s_stride;
  }
  svfloat32_t acc0 = svdup_n_f32(0.0f), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  for (int b = 0; b < blocks; ++b) {
    const std::uint8_t* gb = group + static_cast<std::size_t>(b) * group16::kBlockBytes;
    // 2^(e - 128) exactly (weight_scales_neon): exponent field e, halved, clamped.
    const svuint32_t e = svld1ub_u32(lanes, gb + group16::kNibbleBytes + r0);
    const svfloat32_t halved =
        svmul_n_f32_x(lanes, svreinterpret_f32_u32(svlsl_n_u32_x(lanes, e, 23)), 0.5f);
    const svfloat32_t ws = svmin_n_f32_x(lanes, svmax_n_f32_x(lanes, halved, 0x1p-128f), 0x1p127f);
    const std::int64_t k = 32 * static_cast<std::int64_t>(b);
    const svint8_t xl0 = svld1rq_s8(all, q[0] + k), xh0 = svld1rq_s8(all, q[0] + k + 16);
    const svint8_t xl1 = svld1rq_s8(all, q[1] + k), xh1 = svld1rq_s8(all, q[1] + k + 16);
    const svint8_t xl2 = svld1rq_s8(all, q[2] + k), xh2 = svld1rq_s8(all, q[2] + k + 16);
    const svint8_t xl3 = svld1rq_s8(all, q[3] + k), xh3 = svld1rq_s8(all, q[3] + k + 16);
    svint32_t dot0 = svdup_n_s32(0), dot1 = dot0, dot2 = dot0, dot3 = dot0;
    group_dots<0, N>(gb + 4 * r0, bytes, table, xl0, xh0, xl1, xh1, xl2, xh2, xl3, xh3, dot0, dot1,
                     dot2, dot3);
    group_dots<1, N>(gb + 4 * r0, bytes, table, xl0, xh0, xl1, xh1, xl2, xh2, xl3, xh3, dot0, dot1,
                     dot2, dot3);
    group_dots<2, N>(gb + 4 * r0, bytes, table, xl0, xh0, xl1, xh1, xl2, xh2, xl3, xh3, dot0, dot1,
                     dot2, dot3);
    group_dots<3, N>(gb + 4 * r0, bytes, table, xl0, xh0, xl1, xh1, xl2, xh2, xl3, xh3, dot0, dot1,
                     dot2, dot3);
    acc0 = epilogue(lanes, acc0, dot0, ws, d[0][b]);
    if constexpr (N > 1) acc1 = epilogue(lanes, acc1, dot1, ws, d[1][b]);
    if constexpr (N > 2) acc2 = epilogue(lanes, acc2, dot2, ws, d[2][b]);
    if constexpr (N > 3) acc3 = epilogue(lanes, acc3, dot3, ws, d[3][b]);
  }
  float* dst = out + t0 * out_stride + r0;
  svst1_f32(lanes, dst, acc0);
  if constexpr (N > 1) svst1_f32(lanes, dst + out_stride, acc1);
  if constexpr (N > 2) svst1_f32(lanes, dst + 2 * out_stride, acc2);
  if constexpr (N > 3) svst1_f32(lanes, dst + 3 * out_stride, acc3);
}

}  // namespace

void int8_block32_gemm_16x4__sve(const std::uint8_t* group, int blocks, const QuantRows& x,
                                 int tokens, float* out, std::int64_t out_stride) noexcept {
  const int chunk = std::min(static_cast<int>(svcntw()), group16::kRows);
  for (int r0 = 0; r0 < group16::kRows; r0 += chunk) {
    const int rows = std::min(chunk, group16::kRows - r0);
    for_token_tiles<4>(tokens, [&]<std::size_t N>(int t0) {
      chunk_tokens<N>(group, blocks, x, t0, r0, rows, out, out_stride);
    });
  }
}

}  // namespace mxmoe::int8_kernels
