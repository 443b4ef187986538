// The ISA strip kernels alone (decode + dot), against a float64 dot product of the scalar
// decoders (e2m1_decode x e8m0_decode), including the scale codes that make elements float32
// or bf16 subnormals (0..10) and the largest codes the bf16 decode can fold (up to 250).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/float/avx2_ops.hpp"
#include "backends/float/avx512_bf16_ops.hpp"
#include "backends/float/strip_kernel.hpp"
#include "backends_float/test_layer.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe {
namespace {

using strip::kStripRows;

struct Case {
  int cols;
  std::uint8_t scale_lo, scale_hi;
  int x_exp = 0;  // tokens scaled by 2^x_exp (keeps sums of huge weights finite)
};

// Runs ops over every strip of a random [rows, cols] projection, for tokens 1..max_tokens
// (and a full tile), and checks every (row, token) value against float64.
void check_ops(const strip::StripOps& ops, const Case& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int rows = 8;
  const auto cols = static_cast<std::size_t>(c.cols);
  std::vector<std::uint8_t> blocks(rows * cols / 2), scales(rows * cols / 32);
  std::uniform_int_distribution<int> byte(0, 255), code(c.scale_lo, c.scale_hi);
  for (auto& b : blocks) b = static_cast<std::uint8_t>(byte(rng));
  for (auto& s : scales) s = static_cast<std::uint8_t>(code(rng));
  const Mxfp4View view = Mxfp4View::contiguous(blocks.data(), scales.data(), 1, rows, c.cols);
  const strip::PackedProjection packed = strip::pack_projection(
      view, DenseView{}, strip::RowMap::identity, ops.order, ops.element_bytes == 2);

  // Tokens rounded to the kernel's element type; keep their float value for the reference.
  const int tokens = ops.max_tokens;
  std::vector<float> xf = test::random_tokens(tokens, c.cols, rng);
  std::vector<std::uint16_t> xb(xf.size());
  for (std::size_t i = 0; i < xf.size(); ++i) {
    xf[i] = std::ldexp(xf[i], c.x_exp);
    if (ops.element_bytes == 2) {
      xb[i] = f32_to_bf16(xf[i]);
      xf[i] = bf16_to_f32(xb[i]);
    }
  }
  const auto x_row = [&](int t) -> const void* {
    const std::size_t offset = static_cast<std::size_t>(t) * cols;
    return ops.element_bytes == 2 ? static_cast<const void*>(xb.data() + offset)
                                  : static_cast<const void*>(xf.data() + offset);
  };

  const std::size_t kblocks = cols / 32;
  std::vector<std::byte> decoded_storage(kblocks * kStripRows * (32 * 4 + 4) + 64);
  auto* decoded = reinterpret_cast<std::byte*>(
      (reinterpret_cast<std::uintptr_t>(decoded_storage.data()) + 63) / 64 * 64);
  std::vector<float> dequant(cols);

  for (std::int64_t s = 0; s < packed.strips; ++s) {
    const strip::PackedStrip ps = packed.strip(0, s);
    ops.decode(ps, decoded);
    std::vector<float> full(kStripRows * static_cast<std::size_t>(tokens));
    std::vector<const void*> all_rows;
    for (int t = 0; t < tokens; ++t) all_rows.push_back(x_row(t));
    ops.dot(decoded, packed.kblocks, ps.scale_outside, all_rows.data(), tokens, full.data());
    // The fused decode-and-dot path (few tokens) must give the decoded path's bits for every
    // tile size: the driver picks either by the expert's token count.
    if (ops.fused_dot != nullptr) {
      for (int m = 1; m <= tokens; ++m) {
        std::vector<float> fused(kStripRows * static_cast<std::size_t>(m));
        ops.fused_dot(ps, all_rows.data(), m, fused.data());
        for (int n = 0; n < kStripRows; ++n)
          for (int t = 0; t < m; ++t)
            EXPECT_EQ(std::memcmp(&fused[static_cast<std::size_t>(n * m + t)],
                                  &full[static_cast<std::size_t>(n * tokens + t)], sizeof(float)),
                      0)
                << "fused tile of " << m << " strip " << s << " row " << n << " token " << t;
      }
    }
    for (int n = 0; n < kStripRows; ++n) {
      const std::int64_t r = kStripRows * s + n;
      dequantize_mxfp4({view.row_blocks(0, r), cols / 2}, {view.row_scale(0, r), kblocks}, dequant);
      for (int t = 0; t < tokens; ++t) {
        double exact = 0, magnitude = 0;
        for (std::size_t k = 0; k < cols; ++k) {
          const double term = static_cast<double>(dequant[k]) *
                              static_cast<double>(xf[static_cast<std::size_t>(t) * cols + k]);
          exact += term;
          magnitude += std::fabs(term);
        }
        // float32 accumulation: at most cols/8 + 8 roundings of 2^-24 in any lane chain
        // (8 or 16 lanes, pairs for vdpbf16ps, plus the final tree; avx2's per-block partials
        // add 4 roundings per block to cols/32 accumulations), relative to sum |terms|;
        // plus one float32 subnormal spacing per term for the smallest scales. A single
        // wrongly decoded element is off by ~sum|terms|/cols, far above this.
        const double bound =
            (static_cast<double>(cols) / 8 + 8) * std::ldexp(1.0, -24) * magnitude +
            static_cast<double>(cols) * std::ldexp(1.0, -149);
        const float got = full[static_cast<std::size_t>(n * tokens + t)];
        EXPECT_NEAR(static_cast<double>(got), exact, bound)
            << "strip " << s << " row " << n << " token " << t << " cols " << c.cols;

        // Alone, the token gets the same bits as in the full tile.
        std::vector<float> alone(kStripRows);
        const void* one[1] = {x_row(t)};
        ops.dot(decoded, packed.kblocks, ps.scale_outside, one, 1, alone.data());
        EXPECT_EQ(std::memcmp(&alone[static_cast<std::size_t>(n)], &got, sizeof got), 0)
            << "token " << t << " alone differs from the tile of " << tokens;
      }
    }
  }
}

strip::StripOps avx2_ops(bool fused_via_memory) {
  return {strip::NibbleOrder::row_blocks,
          4,
          avx2_kernels::kMaxTokens,
          &avx2_kernels::fp32_strips_decode__avx2,
          &avx2_kernels::fp32_strips_dot_4x2__avx2,
          fused_via_memory ? &avx2_kernels::fp32_strips_fused_dot_via_memory_4x2__avx2
                           : &avx2_kernels::fp32_strips_fused_dot_4x2__avx2};
}
strip::StripOps bf16_ops() {
  return {strip::NibbleOrder::row_words,
          2,
          avx512_bf16_kernels::kMaxTokens,
          &avx512_bf16_kernels::bf16_dpbf16_strips_decode__avx512_bf16,
          &avx512_bf16_kernels::bf16_dpbf16_strips_dot_4x6__avx512_bf16,
          &avx512_bf16_kernels::bf16_dpbf16_strips_fused_dot_4x6__avx512_bf16};
}

const Case kCases[] = {
    {96, 118, 130},       // typical checkpoint scales; K = 3 x 32 (no 64-multiple)
    {2880, 118, 130},     // gpt-oss K = 90 x 32
    {160, 0, 10},         // float32 subnormal scaled elements; bf16 needs the scale outside
    {160, 0, 1},          // only the two subnormal scale codes
    {224, 2, 12},         // normal bf16 weights whose products vdpbf16ps would flush
    {96, 58, 70},         // both sides of the smallest code bf16 folds (64)
    {96, 240, 252, -40},  // largest foldable code (250) and beyond (scale outside)
};

TEST(StripKernels, Avx2MatchesFloat64) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    GTEST_SKIP() << "CPU lacks AVX2/FMA";
  std::uint64_t seed = 1;
  for (const Case& c : kCases) {
    check_ops(avx2_ops(false), c, seed);
    check_ops(avx2_ops(true), c, seed++);  // the other fused form: the same bits
  }
}

TEST(StripKernels, Avx512Bf16MatchesFloat64) {
  if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512bw"))
    GTEST_SKIP() << "CPU lacks AVX-512 BF16";
  std::uint64_t seed = 100;
  for (const Case& c : kCases) check_ops(bf16_ops(), c, seed++);
}

TEST(StripKernels, Bf16PackingMarksUnfoldableScales) {
  // One row-block with code 1 (a bf16 subnormal once scaled) marks its strip only.
  std::vector<std::uint8_t> blocks(8 * 64 / 2, 0x77), scales(8 * 2, 127);
  scales[5 * 2 + 1] = 1;  // row 5 -> strip 1
  const Mxfp4View view = Mxfp4View::contiguous(blocks.data(), scales.data(), 1, 8, 64);
  const auto packed = strip::pack_projection(view, DenseView{}, strip::RowMap::identity,
                                             strip::NibbleOrder::row_words, true);
  EXPECT_FALSE(packed.strip(0, 0).scale_outside);
  EXPECT_TRUE(packed.strip(0, 1).scale_outside);
  const auto as_float = strip::pack_projection(view, DenseView{}, strip::RowMap::identity,
                                               strip::NibbleOrder::row_blocks, false);
  EXPECT_FALSE(as_float.strip(0, 1).scale_outside);
}

}  // namespace
}  // namespace mxmoe
