// Shared pieces of the MX block quantizers (MXFP4, MXFP8): the block scan, the exact shared
// exponent of both scale rules, exact powers of two and the span-size checks.
// Internal to src/format; nothing here is ISA-specific.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>

#include "format/mx_codes.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe::format_detail {

inline constexpr int kE8m0Bias = 127;
inline constexpr int kMinSharedExp = -127;  // E8M0 code 0
inline constexpr int kMaxSharedExp = 127;   // E8M0 code 254

// 2^k for k in [-127, 127], built from bits (2^-127 is the float32 subnormal 0x00400000).
inline float exact_pow2(int k) noexcept {
  return e8m0_to_float(static_cast<std::uint8_t>(k + kE8m0Bias));
}

struct BlockScan {
  float amax = 0.0f;       // max |x| over the block (meaningful only when all_finite)
  bool all_finite = true;  // false if any element is NaN or +-Inf
};

inline BlockScan scan_block(const float* x) noexcept {
  BlockScan scan;
  for (std::size_t i = 0; i < kMxBlock; ++i) {
    const float magnitude = std::fabs(x[i]);
    scan.all_finite = scan.all_finite && std::isfinite(magnitude);
    scan.amax = std::max(scan.amax, magnitude);
  }
  return scan;
}

// Shared exponent s of a block with 0 < amax < Inf, so that elements are x / 2^s.
// Computed exactly from the float's bits (frexp), never with a floating log2:
//  - floor:    s = floor(log2(amax)) - elem_emax (OCP v1.0), may clip (elem_max, 2^(emax+1)).
//  - round_up: the smallest s with amax <= elem_max * 2^s, i.e. ceil(log2(amax / elem_max)).
// Both are clamped to the E8M0 range [-127, 127].
inline int shared_exponent(float amax, ScaleRule rule, int elem_emax, float elem_max) noexcept {
  int amax_exp = 0;  // amax = amax_mant * 2^amax_exp, amax_mant in [0.5, 1)
  const float amax_mant = std::frexp(amax, &amax_exp);
  int s = 0;
  if (rule == ScaleRule::floor) {
    s = (amax_exp - 1) - elem_emax;
  } else {
    int max_exp = 0;
    const float max_mant = std::frexp(elem_max, &max_exp);
    // amax <= max_mant * 2^(max_exp + s)  <=>  s >= amax_exp - max_exp (+1 if amax_mant > max_mant)
    s = amax_exp - max_exp + (amax_mant > max_mant ? 1 : 0);
  }
  return std::clamp(s, kMinSharedExp, kMaxSharedExp);
}

inline std::uint8_t e8m0_code(int shared_exp) noexcept {
  return static_cast<std::uint8_t>(shared_exp + kE8m0Bias);
}

// Entry checks of the codecs (cold path): a size mismatch is a caller bug, reported loudly.
inline void require(bool condition, const char* message) {
  if (!condition) throw std::invalid_argument(message);
}

}  // namespace mxmoe::format_detail
