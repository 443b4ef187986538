// MXFP8: E4M3 "fn" element codec over all 256 codes, and the block quantizer with both rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mxmoe/format.hpp"
#include "reference.hpp"

namespace mxmoe {
namespace {

bool is_e4m3_nan(unsigned code) {
  return (code & 0x7Fu) == 0x7Fu;
}

TEST(E4m3, AllCodesDecodeToSpecValuesAndRoundTrip) {
  for (unsigned code = 0; code < 256; ++code) {
    const auto c = static_cast<std::uint8_t>(code);
    const float value = e4m3_decode(c);
    if (is_e4m3_nan(code)) {
      EXPECT_TRUE(std::isnan(value)) << code;
      continue;
    }
    EXPECT_EQ(static_cast<double>(value), test::e4m3_reference(code)) << "code " << code;
    EXPECT_EQ(std::signbit(value), code >= 0x80) << "code " << code;  // -0 for 0x80
    EXPECT_EQ(e4m3_encode(value), code) << "code " << code;
  }
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(e4m3_decode(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_decode(0x08), 0x1p-6f);
}

TEST(E4m3, SaturatesAt448AndKeepsNan) {
  EXPECT_EQ(e4m3_encode(448.0f), 0x7E);
  EXPECT_EQ(e4m3_encode(463.9f), 0x7E);
  EXPECT_EQ(e4m3_encode(480.0f), 0x7E);
  EXPECT_EQ(e4m3_encode(1e30f), 0x7E);
  EXPECT_EQ(e4m3_encode(-1e30f), 0xFE);
  EXPECT_EQ(e4m3_encode(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(e4m3_encode(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(e4m3_encode(std::numeric_limits<float>::quiet_NaN()), 0x7F);
}

// Every midpoint between neighbouring E4M3 values (exact in float32), and random values in
// the subnormal, normal and saturating ranges, against the exhaustive float64 search.
TEST(E4m3, EncodeIsNearestEvenOverTheWholeRange) {
  const std::vector<double>& grid = test::e4m3_grid();
  std::vector<float> inputs;
  for (std::size_t c = 1; c < grid.size(); ++c)
    inputs.push_back(static_cast<float>((grid[c - 1] + grid[c]) / 2));
  std::mt19937_64 rng(81);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-14, 10);
  for (int i = 0; i < 50000; ++i) inputs.push_back(std::ldexp(mantissa(rng), exponent(rng)));
  for (float v : inputs) {
    for (float signed_v : {v, -v}) {
      const unsigned expected =
          test::nearest_code_rne(std::fabs(static_cast<double>(signed_v)), grid) |
          (signed_v < 0 ? 0x80u : 0u);
      ASSERT_EQ(e4m3_encode(signed_v), expected) << signed_v;
    }
  }
}

struct Mxfp8 {
  std::vector<std::uint8_t> codes, scales;
};
Mxfp8 quantize(const std::vector<float>& x, ScaleRule rule) {
  Mxfp8 q{std::vector<std::uint8_t>(x.size()), std::vector<std::uint8_t>(x.size() / kMxBlock)};
  quantize_mxfp8(x, rule, q.codes, q.scales);
  return q;
}
std::vector<float> dequantize(const Mxfp8& q) {
  std::vector<float> out(q.codes.size());
  dequantize_mxfp8(q.codes, q.scales, out);
  return out;
}

TEST(Mxfp8, RandomBlocksMatchFloat64ReferenceBothRules) {
  std::mt19937_64 rng(82);
  for (ScaleRule rule : {ScaleRule::floor, ScaleRule::round_up}) {
    for (auto [lo, hi] : {std::pair{-20, 20}, std::pair{-140, -110}, std::pair{100, 118}}) {
      const std::vector<float> x = test::random_blocks(rng, 256, lo, hi);
      const Mxfp8 q = quantize(x, rule);
      const std::vector<float> y = dequantize(q);
      for (std::size_t b = 0; b < q.scales.size(); ++b) {
        double amax = 0;
        for (std::size_t i = 0; i < kMxBlock; ++i)
          amax = std::max(amax, std::fabs(static_cast<double>(x[b * kMxBlock + i])));
        const int s = test::reference_shared_exp(amax, rule, 8, 448.0);
        ASSERT_EQ(q.scales[b], s + 127) << "block " << b;
        for (std::size_t i = b * kMxBlock; i < (b + 1) * kMxBlock; ++i) {
          const double scaled = std::ldexp(static_cast<double>(x[i]), -s);
          const unsigned expected = test::nearest_code_rne(std::fabs(scaled), test::e4m3_grid()) |
                                    (std::signbit(x[i]) ? 0x80u : 0u);
          ASSERT_EQ(q.codes[i], expected) << "x " << x[i];
          ASSERT_EQ(static_cast<double>(y[i]), std::ldexp(test::e4m3_reference(expected), s));
          if (rule == ScaleRule::round_up) {  // never clips: within half a step
            ASSERT_LE(std::fabs(static_cast<double>(y[i]) - static_cast<double>(x[i])),
                      std::ldexp(test::half_step_at(scaled, test::e4m3_grid()), s));
          }
        }
      }
    }
  }
}

TEST(Mxfp8, FloorRuleClipsTheBandAbove448) {
  std::mt19937_64 rng(83);
  std::uniform_real_distribution<float> band(449.0f, 511.0f);
  for (int k = -60; k <= 60; k += 7) {
    std::vector<float> x = test::random_blocks(rng, 1, k, k);
    x[5] = std::ldexp(band(rng), k);
    x[9] = -std::ldexp(band(rng), k);
    const Mxfp8 q = quantize(x, ScaleRule::floor);
    ASSERT_EQ(q.scales[0], k + 127);
    EXPECT_EQ(q.codes[5], 0x7E);
    EXPECT_EQ(q.codes[9], 0xFE);
    EXPECT_EQ(quantize(x, ScaleRule::round_up).scales[0], k + 128);
  }
  // A block whose maximum is 240 * 2^k (= 1.875 * 2^(k+7), representable) is scaled by 2^(k-1)
  // under the floor rule: 480 clips to 448, so the maximum decodes to 224 * 2^k.
  std::vector<float> x = test::random_blocks(rng, 1, -3, 0);
  x[0] = 240.0f;
  const Mxfp8 q = quantize(x, ScaleRule::floor);
  EXPECT_EQ(q.scales[0], 127 - 1);
  EXPECT_EQ(dequantize(q)[0], 224.0f);
  EXPECT_EQ(dequantize(quantize(x, ScaleRule::round_up))[0], 240.0f);
}

// round_up: any block of representable values round-trips. floor: only when the block
// maximum has a mantissa <= 1.75 (the floor rule maps amax = 1.875 * 2^e to 480 * 2^s, past
// 448), so those blocks are pinned with a +-448 * 2^k element.
TEST(Mxfp8, RepresentableValuesRoundTripAtEveryScale) {
  std::mt19937_64 rng(84);
  std::uniform_int_distribution<unsigned> code(0, 255);
  for (ScaleRule rule : {ScaleRule::floor, ScaleRule::round_up}) {
    for (int k = -127; k <= 119; ++k) {  // 448 * 2^119 is the largest finite block maximum
      std::vector<float> x(2 * kMxBlock);
      for (float& v : x) {
        unsigned c = code(rng);
        while (is_e4m3_nan(c)) c = code(rng);
        v = std::ldexp(e4m3_decode(static_cast<std::uint8_t>(c)), k);
      }
      const float pin = rule == ScaleRule::floor ? 448.0f : 1.0f;  // also: never all zero
      x[3] = std::ldexp(pin, k);
      x[40] = std::ldexp(-pin, k);
      const std::vector<float> y = dequantize(quantize(x, rule));
      for (std::size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(x[i]))
            << "k " << k << " x " << x[i];
      }
    }
  }
}

TEST(Mxfp8, SpecialBlocks) {
  std::mt19937_64 rng(85);
  std::vector<float> x = test::random_blocks(rng, 3, -3, 3);
  std::fill(x.begin(), x.begin() + kMxBlock, 0.0f);
  x[2 * kMxBlock + 7] = std::numeric_limits<float>::quiet_NaN();
  const Mxfp8 q = quantize(x, ScaleRule::round_up);
  EXPECT_EQ(q.scales[0], 0);
  EXPECT_EQ(q.scales[2], kE8m0Nan);
  EXPECT_NE(q.scales[1], kE8m0Nan);
  const std::vector<float> y = dequantize(q);
  for (std::size_t i = 0; i < kMxBlock; ++i) {
    EXPECT_EQ(q.codes[i], 0);
    EXPECT_EQ(q.codes[2 * kMxBlock + i], 0);
    EXPECT_TRUE(std::isnan(y[2 * kMxBlock + i]));
  }
  x[kMxBlock] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(quantize(x, ScaleRule::floor).scales[1], kE8m0Nan);
  std::vector<std::uint8_t> codes(32), scales(2);
  EXPECT_THROW(quantize_mxfp8(x, ScaleRule::floor, codes, scales), std::invalid_argument);
}

}  // namespace
}  // namespace mxmoe
