// The expert nonlinearities (glu_math.hpp) on 16 floats with AVX-512F. Include
// ONLY from kernels/*.cpp compiled with AVX-512 flags. Everything here has internal linkage
// (an unnamed namespace), so two kernel objects built with different ISA flags never share,
// through the linker, a body that uses instructions one of them may not run.
#pragma once

#include <immintrin.h>

#include "backends/common/simd/glu_math.hpp"
#include "backends/common/simd/glu_params.hpp"

namespace mxmoe::simd {
namespace {

// The vector operations of glu_math.hpp on 16 floats.
struct Zmm {
  using vec = __m512;
  static vec set1(float v) { return _mm512_set1_ps(v); }
  static vec add(vec a, vec b) { return _mm512_add_ps(a, b); }
  static vec sub(vec a, vec b) { return _mm512_sub_ps(a, b); }
  static vec mul(vec a, vec b) { return _mm512_mul_ps(a, b); }
  static vec div(vec a, vec b) { return _mm512_div_ps(a, b); }
  static vec min(vec a, vec b) { return _mm512_min_ps(a, b); }
  static vec max(vec a, vec b) { return _mm512_max_ps(a, b); }
  static vec fmadd(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
  static vec fnmadd(vec a, vec b, vec c) { return _mm512_fnmadd_ps(a, b, c); }
  static vec round_nearest(vec a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static vec scale_pow2(vec a, vec n) { return _mm512_scalef_ps(a, n); }
};

// act(gate, up) for 16 (gate, up) pairs.
inline __m512 glu(__m512 g, __m512 u, const GluParams& p) {
  return glu_v<Zmm>(g, u, p);
}

// One row of a 32-unit GEMM1 result, 64 floats [gate 0-15 | up 0-15 | gate 16-31 | up 16-31]
// (no bias): a0 / a1 = act(gate + gate_bias, up + up_bias) for units 0-15 / 16-31.
inline void glu_row32(const float* row, const float* gate_bias, const float* up_bias,
                      const GluParams& p, __m512& a0, __m512& a1) {
  a0 = glu(_mm512_add_ps(_mm512_loadu_ps(row), _mm512_loadu_ps(gate_bias)),
           _mm512_add_ps(_mm512_loadu_ps(row + 16), _mm512_loadu_ps(up_bias)), p);
  a1 = glu(_mm512_add_ps(_mm512_loadu_ps(row + 32), _mm512_loadu_ps(gate_bias + 16)),
           _mm512_add_ps(_mm512_loadu_ps(row + 48), _mm512_loadu_ps(up_bias + 16)), p);
}

// 16 floats to bf16 with the exact rule of mxmoe::f32_to_bf16: round to nearest even on the
// dropped bits (carries into the exponent are right, past the largest finite -> Inf; no
// denormal flushing, unlike vcvtneps2bf16), a NaN keeps its sign and high payload, quieted.
inline __m256i to_bf16_rne(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i high = _mm512_srli_epi32(bits, 16);
  const __m512i bias =
      _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), _mm512_and_si512(high, _mm512_set1_epi32(1)));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, high, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

}  // namespace
}  // namespace mxmoe::simd
