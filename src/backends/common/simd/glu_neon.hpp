// The expert nonlinearities (glu_math.hpp) on 4 floats with aarch64 Advanced SIMD: the same
// operations as glu_avx512.hpp and glu_avx2.hpp, so the results are the same bits on Arm as
// on x86. Include ONLY from kernels/*.cpp of an aarch64 set; internal linkage, as the others.
#pragma once

#include <arm_neon.h>

#include "backends/common/simd/glu_math.hpp"
#include "backends/common/simd/glu_params.hpp"

namespace mxmoe::simd {
namespace {

// The vector operations of glu_math.hpp on 4 floats. Each is IEEE-754 binary32 with one
// rounding (FPCR's default: round to nearest even, subnormals kept), as the x86 forms.
struct Neon {
  using vec = float32x4_t;
  static vec set1(float v) { return vdupq_n_f32(v); }
  static vec add(vec a, vec b) { return vaddq_f32(a, b); }
  static vec sub(vec a, vec b) { return vsubq_f32(a, b); }
  static vec mul(vec a, vec b) { return vmulq_f32(a, b); }
  static vec div(vec a, vec b) { return vdivq_f32(a, b); }
  // minps/maxps: a < b ? a : b (b when either is NaN). FMIN would return the NaN instead.
  static vec min(vec a, vec b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
  static vec max(vec a, vec b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
  static vec fmadd(vec a, vec b, vec c) { return vfmaq_f32(c, a, b); }   // a*b + c, fused
  static vec fnmadd(vec a, vec b, vec c) { return vfmsq_f32(c, a, b); }  // c - a*b, fused
  static vec round_nearest(vec a) { return vrndnq_f32(a); }             // ties to even
  // vscalefps as glu_avx2.hpp builds it: a * 2^n1 * 2^n2, n1 = floor(n / 2), n2 = n - n1.
  static vec scale_pow2(vec a, vec n) {
    const int32x4_t k = vcvtq_s32_f32(n);  // n is integral: exact
    const int32x4_t k1 = vshrq_n_s32(k, 1);
    const int32x4_t k2 = vsubq_s32(k, k1);
    const int32x4_t bias = vdupq_n_s32(127);
    const float32x4_t p1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k1, bias), 23));
    const float32x4_t p2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k2, bias), 23));
    return vmulq_f32(vmulq_f32(a, p1), p2);
  }
};

// One row of a 32-unit GEMM1 result, 64 floats [gate 0-15 | up 0-15 | gate 16-31 | up 16-31]
// (no bias): a[q] = act(gate + gate_bias, up + up_bias) for units 4q .. 4q+3.
inline void glu_row32(const float* row, const float* gate_bias, const float* up_bias,
                      const GluParams& p, float32x4_t (&a)[8]) {
  for (int q = 0; q < 8; ++q) {
    const int gate_at = 32 * (q / 4) + 4 * (q % 4);  // gate units 4q.. in the row's layout
    a[q] = glu_v<Neon>(vaddq_f32(vld1q_f32(row + gate_at), vld1q_f32(gate_bias + 4 * q)),
                       vaddq_f32(vld1q_f32(row + gate_at + 16), vld1q_f32(up_bias + 4 * q)), p);
  }
}

}  // namespace
}  // namespace mxmoe::simd
