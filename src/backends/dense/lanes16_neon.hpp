// The halving tree of the 16 lanes on Advanced SIMD (kernels/neon, neon_dotprod): four
// float32x4 hold lanes 0-3, 4-7, 8-11, 12-15. Include ONLY from aarch64 kernels/*.cpp;
// internal linkage, as tiles.hpp.
#pragma once

#include <arm_neon.h>

#include "backends/dense/tiles.hpp"

namespace mxmoe::dense {
namespace {

// s8 = (q0 + q2, q1 + q3), s4 = s8.lo + s8.hi, s2[i] = s4[i] + s4[i + 2], s2[0] + s2[1].
float reduce16(const float32x4_t (&q)[4]) noexcept {
  const float32x4_t s4 = vaddq_f32(vaddq_f32(q[0], q[2]), vaddq_f32(q[1], q[3]));
  const float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
  return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}

}  // namespace
}  // namespace mxmoe::dense
