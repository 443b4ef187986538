// The scalar part of the int16 class's block quantizer (int16_kernels.hpp), written once for
// the AVX2 and the NEON kernels (no intrinsics; internal linkage, as the other kernel headers):
// from the bits of the block's largest bf16 magnitude, its scale d = 2^(e-14) and the two
// exact power-of-two factors whose product is 2^(14-e).
#pragma once

#include <cstdint>

namespace mxmoe::int16_kernels {
namespace {

// The float with value 2^k for k in [-149, 127], built from bits.
inline float pow2(int k) {
  const unsigned bits = k >= -126 ? static_cast<unsigned>(k + 127) << 23 : 1u << (k + 149);
  return __builtin_bit_cast(float, bits);
}

struct BlockScale {
  bool special;  // M = 0 (d = 0) or a value is Inf or NaN (d = NaN): q = 0, corr = 0
  float d;
  float f1, f2;  // b * f1 * f2 = b * 2^(14-e), each product exact (see int16_block32__avx2.cpp)
};

inline BlockScale block_scale(unsigned mbits) {
  if (mbits == 0 || mbits >= 0x7F800000u)
    return {true, mbits == 0 ? 0.0f : __builtin_nanf(""), 0.0f, 0.0f};
  // e = floor(log2 M): from the exponent field, or for a subnormal M from its top set bit.
  const int e = mbits >= 0x00800000u ? static_cast<int>(mbits >> 23) - 127
                                     : (31 - __builtin_clz(mbits)) - 149;
  // 14-e is in [-113, 147], each half in [-57, 74]: for 14-e >= 0 neither product rounds; for
  // 14-e < 0 the first rounds only below 2^-126, where the result rounds to 0 anyway.
  const int k = 14 - e;
  const int k1 = k >> 1;  // floor
  return {false, pow2(e - 14), pow2(k1), pow2(k - k1)};
}

}  // namespace
}  // namespace mxmoe::int16_kernels
