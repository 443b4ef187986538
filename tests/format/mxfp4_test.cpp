// MXFP4 blocks: quantizer (both scale rules) against a float64 reference, round trips,
// special blocks, nibble orders and the vectorized decoders.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "mxmoe/format.hpp"
#include "reference.hpp"

namespace mxmoe {
namespace {

struct Mxfp4 {
  std::vector<std::uint8_t> packed, scales;
};

Mxfp4 quantize(const std::vector<float>& x, ScaleRule rule) {
  Mxfp4 q{std::vector<std::uint8_t>(x.size() / 2), std::vector<std::uint8_t>(x.size() / kMxBlock)};
  quantize_mxfp4(x, rule, q.packed, q.scales);
  return q;
}

std::vector<float> dequantize(const Mxfp4& q) {
  std::vector<float> out(q.scales.size() * kMxBlock);
  dequantize_mxfp4(q.packed, q.scales, out);
  return out;
}

unsigned code_at(const Mxfp4& q, std::size_t i) {
  return i % 2 == 0 ? q.packed[i / 2] & 0x0Fu : q.packed[i / 2] >> 4u;
}

// Every code and scale must equal the float64 reference quantizer (shared exponent by the
// rule's definition, element = nearest E2M1 value to x / 2^s, ties to even, saturating), and
// the decoded value must be the exact float64 product code * 2^s.
void expect_matches_reference(const std::vector<float>& x, ScaleRule rule) {
  const Mxfp4 q = quantize(x, rule);
  const std::vector<float> y = dequantize(q);
  for (std::size_t b = 0; b < q.scales.size(); ++b) {
    double amax = 0;
    for (std::size_t i = 0; i < kMxBlock; ++i)
      amax = std::max(amax, std::fabs(static_cast<double>(x[b * kMxBlock + i])));
    ASSERT_GT(amax, 0.0);
    const int s = test::reference_shared_exp(amax, rule, 2, 6.0);
    ASSERT_EQ(q.scales[b], s + 127) << "block " << b << " amax " << amax;
    for (std::size_t i = b * kMxBlock; i < (b + 1) * kMxBlock; ++i) {
      const double scaled = std::ldexp(static_cast<double>(x[i]), -s);  // exact in float64
      const unsigned expected = test::nearest_code_rne(std::fabs(scaled), test::e2m1_grid()) |
                                (std::signbit(x[i]) ? 8u : 0u);
      ASSERT_EQ(code_at(q, i), expected) << "element " << i << " x " << x[i];
      ASSERT_EQ(static_cast<double>(y[i]), std::ldexp(test::e2m1_reference(expected), s));
    }
  }
}

TEST(Mxfp4, RandomBlocksMatchFloat64ReferenceBothRules) {
  std::mt19937_64 rng(41);
  for (ScaleRule rule : {ScaleRule::floor, ScaleRule::round_up}) {
    expect_matches_reference(test::random_blocks(rng, 512, -20, 20), rule);
    expect_matches_reference(test::random_blocks(rng, 64, -140, -110), rule);  // subnormal inputs
    expect_matches_reference(test::random_blocks(rng, 64, 110, 124), rule);
  }
}

// round_up never clips: every element is within half an E2M1 step (at its magnitude) of x.
TEST(Mxfp4, RoundUpErrorIsAtMostHalfAStep) {
  std::mt19937_64 rng(42);
  const std::vector<float> x = test::random_blocks(rng, 1024, -30, 30);
  const Mxfp4 q = quantize(x, ScaleRule::round_up);
  const std::vector<float> y = dequantize(q);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const int s = q.scales[i / kMxBlock] - 127;
    const double scaled = std::ldexp(static_cast<double>(x[i]), -s);
    ASSERT_LE(std::fabs(scaled), 6.0);
    const double error = std::fabs(static_cast<double>(y[i]) - static_cast<double>(x[i]));
    ASSERT_LE(error, std::ldexp(test::half_step_at(scaled, test::e2m1_grid()), s)) << x[i];
  }
}

// The OCP floor rule scales amax into [4, 8): values in (6 * 2^s, 8 * 2^s) clip to 6 * 2^s.
// Blocks whose amax lies in that band exist in every binade; the rest keep the half-step bound.
TEST(Mxfp4, FloorRuleClipsTheBandAboveSix) {
  std::mt19937_64 rng(43);
  std::uniform_real_distribution<float> band(6.0f, 8.0f), rest(-6.0f, 6.0f);
  std::uniform_int_distribution<int> binade(-100, 100);
  int clipped = 0;
  for (int block = 0; block < 256; ++block) {
    const int k = binade(rng);
    std::vector<float> x(kMxBlock);
    for (float& v : x) v = std::ldexp(rest(rng), k);
    float top = band(rng);
    if (top == 6.0f) top = 7.0f;
    x[static_cast<std::size_t>(block) % kMxBlock] = std::ldexp(block % 2 ? top : -top, k);
    const Mxfp4 q = quantize(x, ScaleRule::floor);
    ASSERT_EQ(q.scales[0], k + 127);
    const std::vector<float> y = dequantize(q);
    for (std::size_t i = 0; i < kMxBlock; ++i) {
      const double scaled = std::ldexp(static_cast<double>(x[i]), -k);
      if (std::fabs(scaled) > 6.0) {
        ASSERT_EQ(static_cast<double>(y[i]), std::copysign(std::ldexp(6.0, k), scaled));
        ++clipped;
      } else {
        const double error = std::fabs(static_cast<double>(y[i]) - static_cast<double>(x[i]));
        ASSERT_LE(error, std::ldexp(test::half_step_at(scaled, test::e2m1_grid()), k));
      }
    }
    // round_up takes the next scale for the same block and does not clip.
    ASSERT_EQ(quantize(x, ScaleRule::round_up).scales[0], k + 128);
  }
  EXPECT_GE(clipped, 256);
}

// Blocks of representable values (random codes times 2^k) decode back to themselves, for
// every k whose block is finite: -127 (2^-128 is a float32 subnormal) .. 125.
TEST(Mxfp4, RepresentableValuesRoundTripAtEveryScale) {
  std::mt19937_64 rng(44);
  std::uniform_int_distribution<unsigned> code(0, 15);
  for (ScaleRule rule : {ScaleRule::floor, ScaleRule::round_up}) {
    for (int k = -127; k <= 125; ++k) {
      std::vector<float> x(4 * kMxBlock);
      for (float& v : x) v = std::ldexp(e2m1_decode(static_cast<std::uint8_t>(code(rng))), k);
      for (std::size_t b = 0; b < 4; ++b)
        x[b * kMxBlock + b] = std::ldexp(0.5f, k);  // never all zero
      const std::vector<float> y = dequantize(quantize(x, rule));
      for (std::size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(x[i]))
            << "k " << k << " element " << i << " x " << x[i] << " y " << y[i];
      }
    }
  }
}

TEST(Mxfp4, AllZeroBlockHasScaleZeroAndPositiveZeroCodes) {
  std::mt19937_64 rng(45);
  std::vector<float> x = test::random_blocks(rng, 3, -4, 4);
  for (std::size_t i = kMxBlock; i < 2 * kMxBlock; ++i) x[i] = (i % 2) ? -0.0f : 0.0f;
  for (ScaleRule rule : {ScaleRule::floor, ScaleRule::round_up}) {
    const Mxfp4 q = quantize(x, rule);
    EXPECT_EQ(q.scales[1], 0);
    for (std::size_t j = kMxfp4BlockBytes; j < 2 * kMxfp4BlockBytes; ++j) EXPECT_EQ(q.packed[j], 0);
    EXPECT_NE(q.scales[0], 0);
    EXPECT_NE(q.scales[2], 0);
  }
}

TEST(Mxfp4, NanOrInfAnywhereMakesTheWholeBlockNan) {
  std::mt19937_64 rng(46);
  const float specials[] = {
      std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()};
  for (float special : specials) {
    for (std::size_t position : {std::size_t{0}, std::size_t{17}, std::size_t{31}}) {
      std::vector<float> x = test::random_blocks(rng, 3, -4, 4);
      x[kMxBlock + position] = special;
      for (ScaleRule rule : {ScaleRule::floor, ScaleRule::round_up}) {
        const Mxfp4 q = quantize(x, rule);
        EXPECT_EQ(q.scales[1], kE8m0Nan);
        for (std::size_t j = kMxfp4BlockBytes; j < 2 * kMxfp4BlockBytes; ++j)
          EXPECT_EQ(q.packed[j], 0);
        EXPECT_NE(q.scales[0], kE8m0Nan);  // neighbours unaffected
        EXPECT_NE(q.scales[2], kE8m0Nan);
        const std::vector<float> y = dequantize(q);
        for (std::size_t i = kMxBlock; i < 2 * kMxBlock; ++i) EXPECT_TRUE(std::isnan(y[i]));
        EXPECT_FALSE(std::isnan(y[0]));
      }
    }
  }
}

TEST(Mxfp4, DecoderUsesGptOssNibbleOrder) {
  // Byte 0 = 0x72: element 0 is code 2 (1.0), element 1 is code 7 (6.0); scale 2^1.
  std::vector<std::uint8_t> packed(kMxfp4BlockBytes, 0x00), scales{128};
  packed[0] = 0x72;
  packed[15] = 0x9F;  // element 30 = code F (-6), element 31 = code 9 (-0.5)
  std::vector<float> out(kMxBlock);
  dequantize_mxfp4(packed, scales, out);
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 12.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[30], -12.0f);
  EXPECT_EQ(out[31], -1.0f);
}

TEST(Mxfp4, SizeMismatchesThrow) {
  std::vector<float> x(64), out(64);
  std::vector<std::uint8_t> packed(32), scales(2), short_packed(31), short_scales(1);
  EXPECT_THROW(
      quantize_mxfp4(std::span<const float>(x).first(40), ScaleRule::floor, packed, scales),
      std::invalid_argument);
  EXPECT_THROW(quantize_mxfp4(x, ScaleRule::floor, short_packed, scales), std::invalid_argument);
  EXPECT_THROW(quantize_mxfp4(x, ScaleRule::round_up, packed, short_scales), std::invalid_argument);
  EXPECT_THROW(dequantize_mxfp4(short_packed, scales, out), std::invalid_argument);
  EXPECT_THROW(dequantize_mxfp4(packed, scales, std::span<float>(out).first(32)),
               std::invalid_argument);
  EXPECT_THROW(dequantize_mxfp4_fast(short_packed, scales, out, Mxfp4Decoder::portable),
               std::invalid_argument);
  EXPECT_NO_THROW(dequantize_mxfp4_fast(packed, scales, out, Mxfp4Decoder::portable));
}

}  // namespace
}  // namespace mxmoe
