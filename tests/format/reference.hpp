// Float64 references for the codec tests, written from the format definitions
// (/work/shared/spec/FORMATS.md), independently of the bit tricks in src/format.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "mxmoe/format.hpp"

namespace mxmoe::test {

// E2M1 from its fields: 1 sign, 2 exponent (bias 1), 1 mantissa bit.
inline double e2m1_reference(unsigned code) {
  const unsigned exponent = (code >> 1) & 3u, mantissa = code & 1u;
  const double magnitude =
      exponent == 0 ? 0.5 * mantissa
                    : (1.0 + 0.5 * mantissa) * std::ldexp(1.0, static_cast<int>(exponent) - 1);
  return (code & 8u) ? -magnitude : magnitude;
}

// E4M3 "fn" from its fields: 1 sign, 4 exponent (bias 7), 3 mantissa bits; S.1111.111 is NaN.
inline double e4m3_reference(unsigned code) {
  const unsigned exponent = (code >> 3) & 15u, mantissa = code & 7u;
  if (exponent == 15 && mantissa == 7) return std::nan("");
  const double magnitude =
      exponent == 0 ? std::ldexp(static_cast<double>(mantissa), -9)
                    : (1.0 + mantissa / 8.0) * std::ldexp(1.0, static_cast<int>(exponent) - 7);
  return (code & 0x80u) ? -magnitude : magnitude;
}

// The non-negative values of a format's magnitude codes 0..count-1 (ascending).
inline std::vector<double> magnitude_grid(double (*decode)(unsigned), unsigned count) {
  std::vector<double> grid;
  for (unsigned c = 0; c < count; ++c) grid.push_back(decode(c));
  return grid;
}
inline const std::vector<double>& e2m1_grid() {
  static const std::vector<double> grid = magnitude_grid(e2m1_reference, 8);
  return grid;
}
inline const std::vector<double>& e4m3_grid() {  // 0x00..0x7E, NaN 0x7F excluded
  static const std::vector<double> grid = magnitude_grid(e4m3_reference, 0x7F);
  return grid;
}

// Nearest grid code to |a| by exhaustive search, ties to the even code (= even mantissa);
// beyond the last value the last code wins (saturation).
inline unsigned nearest_code_rne(double a, const std::vector<double>& grid) {
  unsigned best = 0;
  double best_distance = std::fabs(a - grid[0]);
  for (unsigned c = 1; c < grid.size(); ++c) {
    const double distance = std::fabs(a - grid[c]);
    if (distance < best_distance || (distance == best_distance && c % 2 == 0)) {
      best = c;
      best_distance = distance;
    }
  }
  return best;
}

// Half the distance between the grid neighbours around |y| (|y| <= last grid value).
inline double half_step_at(double y, const std::vector<double>& grid) {
  const double a = std::fabs(y);
  for (std::size_t c = 1; c < grid.size(); ++c) {
    if (a <= grid[c]) return (grid[c] - grid[c - 1]) / 2;
  }
  return 0;
}

// Shared exponent of a block by the rules' textual definitions, with a float64 log2 (exact
// at powers of two; a float32 amax is never close enough to another power of two to err).
inline int reference_shared_exp(double amax, ScaleRule rule, int elem_emax, double elem_max) {
  const int s = rule == ScaleRule::floor ? static_cast<int>(std::floor(std::log2(amax))) - elem_emax
                                         : static_cast<int>(std::ceil(std::log2(amax / elem_max)));
  return s < -127 ? -127 : (s > 127 ? 127 : s);
}

// Random test rows: normal samples, each block scaled by 2^k with k drawn from
// [min_exp, max_exp], and some elements scaled further down to spread the magnitudes.
inline std::vector<float> random_blocks(std::mt19937_64& rng, std::size_t blocks, int min_exp,
                                        int max_exp) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> block_exp(min_exp, max_exp), shrink(0, 6);
  std::vector<float> x(blocks * kMxBlock);
  for (std::size_t b = 0; b < blocks; ++b) {
    const int k = block_exp(rng);
    for (std::size_t i = 0; i < kMxBlock; ++i) {
      x[b * kMxBlock + i] = std::ldexp(normal(rng), k - shrink(rng));
    }
  }
  return x;
}

}  // namespace mxmoe::test
