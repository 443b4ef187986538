// E2M1 element and E8M0 scale codecs: exhaustive over their codes, plus the RNE tie table.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>

#include "mxmoe/format.hpp"
#include "reference.hpp"

namespace mxmoe {
namespace {

TEST(E2m1, AllSixteenCodesDecodeToSpecValues) {
  const float expected[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                              -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (unsigned code = 0; code < 16; ++code) {
    const float value = e2m1_decode(static_cast<std::uint8_t>(code));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(value), std::bit_cast<std::uint32_t>(expected[code]))
        << "code " << code;
    EXPECT_EQ(static_cast<double>(value), test::e2m1_reference(code)) << "code " << code;
    // Only the low nibble is read.
    EXPECT_EQ(std::bit_cast<std::uint32_t>(e2m1_decode(static_cast<std::uint8_t>(code | 0xA0u))),
              std::bit_cast<std::uint32_t>(value));
  }
}

TEST(E2m1, EveryCodeRoundTrips) {
  for (unsigned code = 0; code < 16; ++code) {
    EXPECT_EQ(e2m1_encode(e2m1_decode(static_cast<std::uint8_t>(code))), code);
  }
}

TEST(E2m1, TiesRoundToEvenWithSignAndNegativeZeroKept) {
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const float rounded[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f};
  for (std::size_t i = 0; i < std::size(ties); ++i) {
    EXPECT_EQ(e2m1_decode(e2m1_encode(ties[i])), rounded[i]) << ties[i];
    EXPECT_EQ(e2m1_decode(e2m1_encode(-ties[i])), -rounded[i]) << -ties[i];
  }
  EXPECT_EQ(e2m1_encode(-0.25f), 0x8);  // -0 kept
  EXPECT_EQ(e2m1_encode(-0.0f), 0x8);
  EXPECT_EQ(e2m1_encode(0.0f), 0x0);
  // Just off the midpoints the nearest value wins.
  EXPECT_EQ(e2m1_decode(e2m1_encode(std::nextafter(0.25f, 1.0f))), 0.5f);
  EXPECT_EQ(e2m1_decode(e2m1_encode(std::nextafter(0.75f, 0.0f))), 0.5f);
  EXPECT_EQ(e2m1_decode(e2m1_encode(std::nextafter(5.0f, 6.0f))), 6.0f);
}

TEST(E2m1, SaturatesAndNanMapsToPositiveZero) {
  EXPECT_EQ(e2m1_encode(6.5f), 0x7);
  EXPECT_EQ(e2m1_encode(-1e30f), 0xF);
  EXPECT_EQ(e2m1_encode(INFINITY), 0x7);
  EXPECT_EQ(e2m1_encode(-INFINITY), 0xF);
  EXPECT_EQ(e2m1_encode(NAN), 0x0);
}

TEST(E2m1, RandomValuesMatchFloat64NearestEven) {
  std::mt19937_64 rng(0xE2A1);
  std::uniform_real_distribution<float> uniform(-8.0f, 8.0f);
  for (int i = 0; i < 100000; ++i) {
    const float v = uniform(rng);
    const unsigned magnitude =
        test::nearest_code_rne(std::fabs(static_cast<double>(v)), test::e2m1_grid());
    const unsigned expected = magnitude | (std::signbit(v) ? 8u : 0u);
    ASSERT_EQ(e2m1_encode(v), expected) << v;
  }
}

TEST(E8m0, AllCodesDecodeToPowersOfTwo) {
  for (unsigned code = 0; code < 255; ++code) {
    const float value = e8m0_decode(static_cast<std::uint8_t>(code));
    EXPECT_EQ(static_cast<double>(value), std::ldexp(1.0, static_cast<int>(code) - 127))
        << "code " << code;
  }
  EXPECT_EQ(std::fpclassify(e8m0_decode(0)), FP_SUBNORMAL);  // 2^-127, not flushed
  EXPECT_EQ(std::bit_cast<std::uint32_t>(e8m0_decode(0)), 0x00400000u);
  EXPECT_EQ(e8m0_decode(127), 1.0f);
  EXPECT_EQ(e8m0_decode(254), 0x1p127f);
  EXPECT_TRUE(std::isnan(e8m0_decode(kE8m0Nan)));
}

}  // namespace
}  // namespace mxmoe
