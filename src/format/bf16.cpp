// BF16 <-> F32: bf16 is the upper half of a float32.
#include <bit>
#include <cmath>
#include <cstdint>

#include "mxmoe/format.hpp"

namespace mxmoe {

std::uint16_t f32_to_bf16(float v) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
  if (std::isnan(v)) {
    // Truncating a NaN whose payload sits in the low 16 bits would give Inf: keep the sign
    // and the high payload bits, and set the quiet bit.
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  }
  // Round to nearest even on the 16 dropped bits. A carry out of the mantissa increments the
  // exponent, which is exactly right, and turns values past the largest finite bf16 into Inf.
  const std::uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding_bias) >> 16);
}

float bf16_to_f32(std::uint16_t v) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(v) << 16);
}

}  // namespace mxmoe
