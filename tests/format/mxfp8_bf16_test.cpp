// MXFP8 values as bf16, the inputs of the bf16 backends (format/activation_rounding.hpp):
// exhaustively over every E4M3 code and every E8M0 scale, the exactness range that
// docs/ACCURACY.md proves, and what happens outside it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "format/activation_rounding.hpp"
#include "mxmoe/format.hpp"
#include "reference.hpp"

namespace mxmoe {
namespace {

// The bf16 bits as a double, decoded from the fields (not with the library's converter).
double bf16_value(std::uint16_t bits) {
  const int exponent = (bits >> 7) & 0xFF, mantissa = bits & 0x7F;
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0xFF)
    return mantissa ? std::nan("") : sign * std::numeric_limits<double>::infinity();
  if (exponent == 0) return sign * std::ldexp(mantissa, -133);
  return sign * std::ldexp(128 + mantissa, exponent - 134);
}

// Every (E4M3 code, E8M0 scale) pair: the value v = code x 2^(s-127) the reference computes
// (in float32, as dequantize_mxfp8 does) is exactly the bf16 the kernels get when
// |v| >= 2^-126 (and finite), and a zero of v's sign below: the claim of ACCURACY.md.
TEST(Mxfp8ToBf16, ExhaustiveOverCodesAndScales) {
  int exact = 0, flushed = 0, overflow = 0;
  for (unsigned scale = 0; scale < 255; ++scale) {
    for (unsigned code = 0; code < 256; ++code) {
      if ((code & 0x7F) == 0x7F) continue;  // NaN codes never come out of the quantizer
      const double want =
          test::e4m3_reference(code) * std::ldexp(1.0, static_cast<int>(scale) - 127);
      const float v = e4m3_decode(static_cast<std::uint8_t>(code)) *
                      e8m0_decode(static_cast<std::uint8_t>(scale));
      const std::uint16_t b = mxfp8_value_to_bf16(v);
      if (std::fabs(want) >= 0x1p128) {  // beyond float32: the reference's value is inf too
        EXPECT_TRUE(std::isinf(v));
        EXPECT_EQ(bf16_value(b), static_cast<double>(v)) << code << " " << scale;
        ++overflow;
      } else if (std::fabs(want) >= 0x1p-126) {
        ASSERT_EQ(static_cast<double>(v), want) << code << " " << scale;  // float32 is exact
        ASSERT_EQ(bf16_value(b), want) << "code " << code << " scale " << scale;
        ++exact;
      } else {
        ASSERT_EQ(b & 0x7FFF, 0) << "code " << code << " scale " << scale;
        ASSERT_EQ((b & 0x8000) != 0, std::signbit(want)) << code << " " << scale;
        if (want != 0) ++flushed;
      }
    }
  }
  // Flushing happens only for scale codes below 10 (2^-9 x 2^(9-127) = 2^-127 < 2^-126).
  int flushed_from_10 = 0;
  for (unsigned scale = 10; scale < 255; ++scale)
    for (unsigned code = 1; code < 0x7F; ++code) {
      const float v = e4m3_decode(static_cast<std::uint8_t>(code)) *
                      e8m0_decode(static_cast<std::uint8_t>(scale));
      if (std::isfinite(v) && bf16_value(mxfp8_value_to_bf16(v)) != static_cast<double>(v))
        ++flushed_from_10;
    }
  EXPECT_EQ(flushed_from_10, 0);
  EXPECT_GT(exact, 50000);
  EXPECT_GT(flushed, 0);
  EXPECT_GT(overflow, 0);
}

std::vector<float> random_row(std::size_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// The bf16 backends' rounding equals the reference's rounding (round_activations), bit for
// bit once widened, for ordinary rows and rows with outliers, zeros and tiny blocks.
TEST(Mxfp8ToBf16, RoundActivationsBf16MatchesTheReferenceRounding) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    std::vector<float> x = random_row(256, seed, 1.0f);
    x[3] = 1000.0f;                                           // an outlier
    for (std::size_t i = 32; i < 64; ++i) x[i] = 0.0f;        // an all-zero block
    for (std::size_t i = 64; i < 96; ++i) x[i] *= 0x1p-120f;  // a block of tiny values
    std::vector<float> rounded(x.size());
    std::vector<std::uint16_t> bits(x.size());
    std::vector<std::byte> scratch(rounding_bf16_scratch_bytes(x.size()));
    round_activations(ActivationFormat::mxfp8, x, rounded, scratch.data());
    round_activations_bf16(ActivationFormat::mxfp8, x, bits, scratch.data());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double r = rounded[i];
      if (std::fabs(r) >= 0x1p-126)
        EXPECT_EQ(bf16_value(bits[i]), r) << i;
      else
        EXPECT_EQ(bits[i] & 0x7FFF, 0) << i;
    }
    round_activations_bf16(ActivationFormat::bf16, x, bits, scratch.data());
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(bits[i], f32_to_bf16(x[i]));
  }
}

TEST(Mxfp8ToBf16, FormatsThatAreNotBf16ValuesAreRefused) {
  std::vector<float> x(32, 1.0f);
  std::vector<std::uint16_t> bits(32);
  std::vector<std::byte> scratch(rounding_bf16_scratch_bytes(32));
  EXPECT_THROW(round_activations_bf16(ActivationFormat::f32, x, bits, scratch.data()),
               std::invalid_argument);
  EXPECT_THROW(round_activations_bf16(ActivationFormat::int8, x, bits, scratch.data()),
               std::invalid_argument);
}

}  // namespace
}  // namespace mxmoe
