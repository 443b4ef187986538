// Element and scale code tables shared by the decoders (internal to src/format). Plain
// C++ only: these inline functions are also inlined into the ISA-targeted decoders, and an
// ISA-targeted inline function in a header would be an ODR hazard.
#pragma once

#include <bit>
#include <cstdint>

namespace mxmoe::format_detail {

// The 16 E2M1 values, indexed by the 4-bit code.
inline constexpr float kE2m1Values[16] = {
    0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,   // sign bit clear
    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f,  // sign bit set
};

// E8M0 code -> float32, branch-free. Codes 1..254 are the normal floats with that biased
// exponent and a zero mantissa. Code 0 (2^-127) is the subnormal with only mantissa bit 22
// set; 0xFF would be Inf by the same rule, and that bit turns it into the quiet NaN.
constexpr float e8m0_to_float(std::uint8_t code) noexcept {
  const std::uint32_t exponent_bits = static_cast<std::uint32_t>(code) << 23;
  const std::uint32_t extra_bit = (code == 0 || code == 0xFF) ? 0x00400000u : 0u;
  return std::bit_cast<float>(exponent_bits | extra_bit);
}

}  // namespace mxmoe::format_detail
