// FP8 E4M3 matrices with one E8M0 scale per square block (DeepSeek-V4's shared experts):
// each block's scale is the smallest power of two that brings its largest magnitude within
// E4M3's 448, and every element is the nearest E4M3 value of v / scale (checked against the
// independent decoder of reference.hpp, in float64).
#include "format/e4m3_blocks.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "reference.hpp"

namespace mxmoe {
namespace {

TEST(E4m3Blocks, ScalesAreTheSmallestPowerOfTwoAndCodesTheNearestValues) {
  // 300 x 200 in 128-blocks: full blocks and the partial ones at the right and bottom edges;
  // block magnitudes from 2^-140 (the scale's floor) to 2^20.
  constexpr std::int64_t rows = 300, cols = 200, block = 128;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<float> values(static_cast<std::size_t>(rows * cols));
  const std::int64_t scale_rows = 3, scale_cols = 2;
  const int magnitude[scale_rows][scale_cols] = {{0, 20}, {-140, -9}, {5, -30}};
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      values[static_cast<std::size_t>(r * cols + c)] = static_cast<float>(
          std::ldexp(uniform(rng), magnitude[r / block][c / block]));
  std::vector<std::uint8_t> codes(values.size()), scales(scale_rows * scale_cols);
  format::quantize_e4m3_blocks(values, rows, cols, block, codes, scales);
  for (std::int64_t br = 0; br < scale_rows; ++br)
    for (std::int64_t bc = 0; bc < scale_cols; ++bc) {
      double amax = 0;
      for (std::int64_t r = br * block; r < std::min(rows, (br + 1) * block); ++r)
        for (std::int64_t c = bc * block; c < std::min(cols, (bc + 1) * block); ++c)
          amax = std::max(amax, std::fabs(static_cast<double>(values[static_cast<std::size_t>(r * cols + c)])));
      const int k = scales[static_cast<std::size_t>(br * scale_cols + bc)] - 127;
      EXPECT_LE(amax, std::ldexp(448.0, k)) << br << "," << bc;
      if (k > -127) {
        EXPECT_GT(amax, std::ldexp(448.0, k - 1)) << br << "," << bc;
      }
      for (std::int64_t r = br * block; r < std::min(rows, (br + 1) * block); ++r)
        for (std::int64_t c = bc * block; c < std::min(cols, (bc + 1) * block); ++c) {
          const std::size_t i = static_cast<std::size_t>(r * cols + c);
          const double target = std::ldexp(static_cast<double>(values[i]), -k);
          const double got = test::e4m3_reference(codes[i]);
          // No finite E4M3 value is nearer to the target than the chosen one.
          for (unsigned other = 0; other < 256; ++other) {
            if ((other & 0x7Fu) == 0x7Fu) continue;  // NaN
            ASSERT_LE(std::fabs(got - target), std::fabs(test::e4m3_reference(other) - target))
                << "element " << r << "," << c << ": code " << int{codes[i]} << " vs " << other;
          }
        }
    }
}

TEST(E4m3Blocks, MismatchedSizesAreRefused) {
  std::vector<float> values(6);
  std::vector<std::uint8_t> codes(6), scales(1), too_few(5);
  EXPECT_NO_THROW(format::quantize_e4m3_blocks(values, 2, 3, 128, codes, scales));
  EXPECT_THROW(format::quantize_e4m3_blocks(values, 2, 3, 128, too_few, scales),
               std::invalid_argument);
  EXPECT_THROW(format::quantize_e4m3_blocks(values, 3, 3, 128, codes, scales),
               std::invalid_argument);
  EXPECT_THROW(format::quantize_e4m3_blocks(values, 2, 3, 0, codes, scales),
               std::invalid_argument);
}

}  // namespace
}  // namespace mxmoe
