// E2M1 elements and E8M0 scales: the two halves of MXFP4 (OCP Microscaling v1.0).
#include <cmath>
#include <cstdint>

#include "format/mx_codes.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe {

float e2m1_decode(std::uint8_t code) noexcept {
  return format_detail::kE2m1Values[code & 0x0Fu];
}

std::uint8_t e2m1_encode(float v) noexcept {
  if (std::isnan(v)) return 0;
  const float a = std::fabs(v);
  // The magnitude code is the number of decision points passed. At a midpoint the even code
  // wins (ties to even mantissa): 0.25->0, 0.75->2 (1.0), 1.25->2, 1.75->4 (2.0), 2.5->4,
  // 3.5->6 (4.0), 5.0->6; hence '>' at midpoints below an even code, '>=' below an odd one.
  // Everything above 5 (Inf included) saturates to code 7 (6.0).
  const int magnitude = static_cast<int>(a > 0.25f) + static_cast<int>(a >= 0.75f) +
                        static_cast<int>(a > 1.25f) + static_cast<int>(a >= 1.75f) +
                        static_cast<int>(a > 2.5f) + static_cast<int>(a >= 3.5f) +
                        static_cast<int>(a > 5.0f);
  const int sign = std::signbit(v) ? 0x8 : 0x0;
  return static_cast<std::uint8_t>(sign | magnitude);
}

float e8m0_decode(std::uint8_t code) noexcept {
  return format_detail::e8m0_to_float(code);
}

}  // namespace mxmoe
