// BF16 <-> F32: round to nearest even on the dropped 16 bits, NaN kept, Inf kept.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>

#include "mxmoe/format.hpp"

namespace mxmoe {
namespace {

std::uint16_t to_bf16(std::uint32_t f32_bits) {
  return f32_to_bf16(std::bit_cast<float>(f32_bits));
}

TEST(Bf16, TiesRoundToEven) {
  EXPECT_EQ(to_bf16(0x3F808000u), 0x3F80);  // 1 + 2^-8: halfway, 0x3F80 is even
  EXPECT_EQ(to_bf16(0x3F818000u), 0x3F82);  // halfway, 0x3F81 odd -> up
  EXPECT_EQ(to_bf16(0x3F808001u), 0x3F81);  // just above halfway
  EXPECT_EQ(to_bf16(0x3F817FFFu), 0x3F81);  // just below halfway
  EXPECT_EQ(to_bf16(0xBF818000u), 0xBF82);  // sign symmetric
  EXPECT_EQ(to_bf16(0x3FFF8000u), 0x4000);  // carry into the exponent
}

TEST(Bf16, MaxFiniteAndInfinity) {
  EXPECT_EQ(to_bf16(0x7F7F0000u), 0x7F7F);  // largest finite bf16 is exact
  EXPECT_EQ(to_bf16(0x7F7F7FFFu), 0x7F7F);  // below the midpoint to 2^128
  EXPECT_EQ(to_bf16(0x7F7F8000u), 0x7F80);  // tie: odd 0x7F7F loses, rounds to Inf
  EXPECT_EQ(to_bf16(0x7F7FFFFFu), 0x7F80);  // FLT_MAX rounds to Inf
  EXPECT_EQ(to_bf16(0xFF7FFFFFu), 0xFF80);
  EXPECT_EQ(to_bf16(0x7F800000u), 0x7F80);
  EXPECT_EQ(to_bf16(0xFF800000u), 0xFF80);
  EXPECT_TRUE(std::isinf(bf16_to_f32(0x7F80)));
}

TEST(Bf16, NanStaysQuietNan) {
  for (std::uint32_t nan :
       {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7F80FFFFu, 0xFF800001u, 0x7FFFFFFFu}) {
    const std::uint16_t b = to_bf16(nan);
    EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << nan;
    EXPECT_EQ(b & 0x0040u, 0x0040u) << std::hex << nan;                // quiet bit
    EXPECT_EQ(b & 0x8000u, (nan >> 16) & 0x8000u) << std::hex << nan;  // sign kept
  }
}

TEST(Bf16, Subnormals) {
  EXPECT_EQ(to_bf16(0x00010000u), 0x0001);  // smallest bf16 subnormal, exact
  EXPECT_EQ(to_bf16(0x00008000u), 0x0000);  // tie to even zero
  EXPECT_EQ(to_bf16(0x00018000u), 0x0002);  // tie to even
  EXPECT_EQ(to_bf16(0x00008001u), 0x0001);
  EXPECT_EQ(to_bf16(0x007FFFFFu), 0x0080);  // rounds up into the smallest normal
  EXPECT_EQ(to_bf16(0x80008000u), 0x8000);  // -0 kept
  EXPECT_EQ(std::bit_cast<std::uint32_t>(bf16_to_f32(0x0001)), 0x00010000u);
}

TEST(Bf16, EveryBf16RoundTrips) {
  for (std::uint32_t code = 0; code <= 0xFFFF; ++code) {
    const auto b = static_cast<std::uint16_t>(code);
    const float f = bf16_to_f32(b);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(f), code << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), b) << code;
    }
  }
}

// Random float32 bit patterns (all binades) against a float64 nearest-even reference: the
// two bf16 neighbours of |x| are the truncation and the next value up one bf16 ulp (which is
// 2^128 past the largest finite value, i.e. Inf); the nearer wins, on a tie the even one.
TEST(Bf16, RandomFloatsMatchFloat64NearestEven) {
  std::mt19937_64 rng(91);
  for (int i = 0; i < 200000; ++i) {
    const auto bits = static_cast<std::uint32_t>(rng());
    const float x = std::bit_cast<float>(bits);
    if (std::isnan(x) || std::isinf(x)) continue;
    const std::uint32_t down_bits = bits & 0x7FFF0000u;
    const int biased_exp = static_cast<int>(down_bits >> 23);
    const double ulp = std::ldexp(1.0, std::max(biased_exp, 1) - 127 - 7);
    const double down = static_cast<double>(std::bit_cast<float>(down_bits));
    const double a = std::fabs(static_cast<double>(x));
    const double below = a - down, above = down + ulp - a;
    const bool up = above < below || (above == below && ((down_bits >> 16) & 1u));
    const auto expected =
        static_cast<std::uint16_t>(((bits & 0x80000000u) | down_bits) >> 16) + (up ? 1 : 0);
    ASSERT_EQ(f32_to_bf16(x), expected) << std::hex << bits;
  }
}

}  // namespace
}  // namespace mxmoe
