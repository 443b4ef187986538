// The E8M0 block scales of the float strip kernels (kernels/avx2/, kernels/neon/), written
// once: 2^(code-128), the scale halved because the weights are the doubled E2M1 values, built
// from bits at compile time (codes 0 and 1 give the float32 subnormals 2^-128 and 2^-127; code
// 255, a NaN scale the loader refuses, would read 2^127). A constexpr table with internal
// linkage: no function of this header is emitted, so nothing ISA-specific can reach generic
// code.
#pragma once

namespace mxmoe::strip {
namespace {

struct HalfScales {
  float value[256];
};
constexpr HalfScales make_half_scales() {
  HalfScales t{};
  for (unsigned code = 0; code < 256; ++code) {
    const unsigned bits = code >= 2 ? (code - 1) << 23 : 0x00200000u << code;
    t.value[code] = __builtin_bit_cast(float, bits);
  }
  return t;
}
constexpr HalfScales kHalfScales = make_half_scales();

}  // namespace
}  // namespace mxmoe::strip
