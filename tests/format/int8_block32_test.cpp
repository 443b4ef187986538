// Symmetric int8 per 32-element block (d = amax / 127, q = RNE(x * (1/d))).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mxmoe/format.hpp"
#include "reference.hpp"

namespace mxmoe {
namespace {

struct Int8Blocks {
  std::vector<std::int8_t> q;
  std::vector<float> d;
};
Int8Blocks quantize(const std::vector<float>& x) {
  Int8Blocks r{std::vector<std::int8_t>(x.size()), std::vector<float>(x.size() / kMxBlock)};
  quantize_int8_block32(x, r.q, r.d);
  return r;
}

// |x - d q| <= d/2 up to float32 rounding: 1/d and x * (1/d) carry ~2 ulp (2^-23 relative)
// of |x/d| <= 127 (< 2^-15 d in x), and d * q rounds by 2^-24 |x|; 2^-12 d covers both.
TEST(Int8Block32, ErrorIsAtMostHalfTheStep) {
  std::mt19937_64 rng(61);
  const std::vector<float> x = test::random_blocks(rng, 2048, -40, 40);
  const Int8Blocks r = quantize(x);
  std::vector<float> y(x.size());
  dequantize_int8_block32(r.q, r.d, y);
  for (std::size_t b = 0; b < r.d.size(); ++b) {
    float amax = 0;
    for (std::size_t i = 0; i < kMxBlock; ++i)
      amax = std::max(amax, std::fabs(x[b * kMxBlock + i]));
    ASSERT_EQ(r.d[b], amax / 127.0f);  // the definition, bit for bit
    const double d = static_cast<double>(r.d[b]);
    for (std::size_t i = b * kMxBlock; i < (b + 1) * kMxBlock; ++i) {
      ASSERT_GE(r.q[i], -127);
      const double error = std::fabs(static_cast<double>(y[i]) - static_cast<double>(x[i]));
      ASSERT_LE(error, d * (0.5 + 0x1p-12)) << "x " << x[i] << " q " << int{r.q[i]};
      // And q is exactly the defined arithmetic.
      ASSERT_EQ(r.q[i], static_cast<std::int8_t>(std::nearbyint(x[i] * (1.0f / r.d[b]))));
    }
  }
}

TEST(Int8Block32, ExtremesReachPlusMinus127) {
  std::mt19937_64 rng(62);
  std::vector<float> x = test::random_blocks(rng, 1, -2, 2);
  x[4] = 10.0f;
  x[8] = -10.0f;
  const Int8Blocks r = quantize(x);
  EXPECT_EQ(r.q[4], 127);
  EXPECT_EQ(r.q[8], -127);
}

TEST(Int8Block32, ZeroBlockHasZeroScaleAndCodes) {
  std::mt19937_64 rng(63);
  std::vector<float> x = test::random_blocks(rng, 2, -2, 2);
  std::fill(x.begin() + kMxBlock, x.end(), 0.0f);
  const Int8Blocks r = quantize(x);
  EXPECT_GT(r.d[0], 0.0f);
  EXPECT_EQ(r.d[1], 0.0f);
  for (std::size_t i = kMxBlock; i < 2 * kMxBlock; ++i) EXPECT_EQ(r.q[i], 0);
}

// Non-finite input is not turned into finite numbers: d becomes NaN (NaN in the block) or
// Inf (Inf in the block), q = 0 where x * (1/d) is NaN, and the block dequantizes to NaN.
TEST(Int8Block32, NanOrInfMakesTheScaleNonFinite) {
  std::mt19937_64 rng(64);
  for (float special :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = test::random_blocks(rng, 2, -2, 2);
    x[kMxBlock + 11] = special;
    const Int8Blocks r = quantize(x);
    EXPECT_TRUE(std::isfinite(r.d[0]));
    EXPECT_FALSE(std::isfinite(r.d[1]));
    EXPECT_EQ(std::isnan(r.d[1]), std::isnan(special));
    std::vector<float> y(x.size());
    dequantize_int8_block32(r.q, r.d, y);
    for (std::size_t i = kMxBlock; i < 2 * kMxBlock; ++i) {
      EXPECT_EQ(r.q[i], 0);
      EXPECT_TRUE(std::isnan(y[i]));
    }
  }
}

TEST(Int8Block32, SizeMismatchesThrow) {
  std::vector<float> x(64), d(2), out(64);
  std::vector<std::int8_t> q(64);
  EXPECT_THROW(quantize_int8_block32(std::span<const float>(x).first(48), q, d),
               std::invalid_argument);
  EXPECT_THROW(quantize_int8_block32(x, std::span<std::int8_t>(q).first(32), d),
               std::invalid_argument);
  EXPECT_THROW(dequantize_int8_block32(q, std::span<const float>(d).first(1), out),
               std::invalid_argument);
}

}  // namespace
}  // namespace mxmoe
