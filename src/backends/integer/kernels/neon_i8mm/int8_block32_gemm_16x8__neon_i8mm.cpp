// The int8 class's 16-row GEMM with smmla (Armv8.6 I8MM, optional from Armv8.2: Neoverse V1,
// V2, N2; Graviton 3 and 4, Grace). smmla multiplies a 2x8 int8 matrix by the transpose of
// another 2x8 into a 2x2 int32 tile: here two weight rows' 8 consecutive elements against two
// tokens' 8, 32 multiply-adds an instruction where sdot by lane does 16. The block dots are
// exact int32 sums, the epilogue is int8_block32_gemm_16x4__neon_dotprod's, element for element, so
// the bits are the int8 class's (int8_kernels.hpp). On the skeleton of int8_neon.hpp; the quantizer
// and the GLU are the neon_dotprod folder's.
#include <arm_neon.h>

#include "backends/integer/int8_kernels.hpp"
#include "backends/integer/kernels/int8_neon.hpp"

namespace mxmoe::int8_kernels {
namespace {

// Rows 4c, 4c+1 (first) and 4c+2, 4c+3 (second) of nibble group h, each row's elements
// 8h .. 8h+7 in 8 consecutive bytes: smmla's row operand. decode_codes gives row 4c+i's
// elements 8h+j at byte 4i+j of lo and 8h+4+j of hi; interleaving 4-byte words joins them.
struct RowPairs {
  int8x16_t first, second;
};
__attribute__((always_inline)) inline RowPairs row_pairs(const std::uint8_t* block, int h, int c,
                                                         int8x16_t table) {
  const CodePair w = decode_codes(block, h, c, table);
  const int32x4_t lo = vreinterpretq_s32_s8(w.lo), hi = vreinterpretq_s32_s8(w.hi);
  return {vreinterpretq_s8_s32(vzip1q_s32(lo, hi)), vreinterpretq_s8_s32(vzip2q_s32(lo, hi))};
}

// Rows 4c .. 4c+3 of a block against N tokens taken in pairs: P pairs cover N = 2P - 1 or 2P
// tokens (an odd tile's last pair repeats its last token, computed and not kept). Per nibble
// group h, a pair's column operand holds token 2p's elements 8h .. 8h+7, then token 2p+1's,
// built as it is used (two loads and a zip: fewer live registers than keeping all four), and
// a row pair gives [row r, token 2p | r, 2p+1 | r+1, 2p | r+1, 2p+1].
template <std::size_t N>
__attribute__((always_inline)) inline void quad_dots(const std::uint8_t* block, int c,
                                                     std::int64_t k, int8x16_t table,
                                                     const std::int8_t* const (&q)[N],
                                                     int32x4_t (&dot)[N]) {
  constexpr std::size_t P = (N + 1) / 2;
  int32x4_t pair_dot[P][2];  // [p][0]: rows 4c, 4c+1; [p][1]: rows 4c+2, 4c+3
  for (std::size_t p = 0; p < P; ++p) pair_dot[p][0] = pair_dot[p][1] = vdupq_n_s32(0);
  for (int h = 0; h < 4; ++h) {
    const RowPairs w = row_pairs(block, h, c, table);
    for (std::size_t p = 0; p < P; ++p) {
      const std::int64_t half = k + 16 * (h / 2);
      const int64x2_t a = vreinterpretq_s64_s8(vld1q_s8(q[2 * p] + half));
      const int64x2_t e =
          vreinterpretq_s64_s8(vld1q_s8(q[2 * p + 1 < N ? 2 * p + 1 : N - 1] + half));
      const int8x16_t x = vreinterpretq_s8_s64(h % 2 == 0 ? vzip1q_s64(a, e) : vzip2q_s64(a, e));
      pair_dot[p][0] = vmmlaq_s32(pair_dot[p][0], w.first, x);
      pair_dot[p][1] = vmmlaq_s32(pair_dot[p][1], w.second, x);
    }
  }
  // Rows 4c .. 4c+3 of token 2p are the even lanes, of token 2p+1 the odd ones.
  for (std::size_t p = 0; p < P; ++p) {
    dot[2 * p] = vuzp1q_s32(pair_dot[p][0], pair_dot[p][1]);
    if (2 * p + 1 < N) dot[2 * p + 1] = vuzp2q_s32(pair_dot[p][0], pair_dot[p][1]);
  }
}

}  // namespace

void int8_block32_gemm_16x8__neon_i8mm(const std::uint8_t* group, int blocks, const QuantRows& x,
                                       int tokens, float* out, std::int64_t out_stride) noexcept {
  // Tiles of 8 tokens (4 pairs): the decoded row pairs serve 4 smmla each.
  gemm16_neon<8>(
      group, blocks, x, tokens, out, out_stride,
      [](const std::uint8_t* block, int c, std::int64_t k, int8x16_t table, const auto& q,
         auto& dot) { quad_dots(block, c, k, table, q, dot); },
      &int8_epilogue_neon);
}

}  // namespace mxmoe::int8_kernels
