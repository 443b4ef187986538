// The expert nonlinearities (src/model/activation.hpp) on 16 floats with AVX-512F. Include
// ONLY from kernels/*.cpp compiled with AVX-512 flags. Everything here has internal linkage
// (an unnamed namespace), so two kernel objects built with different ISA flags never share,
// through the linker, a body that uses instructions one of them may not run.
#pragma once

#include <immintrin.h>

#include "backends/common/simd/glu_params.hpp"

namespace mxmoe::simd {
namespace {

// e^x to about 1 ulp: x = n ln2 + r, |r| <= ln2/2, degree-7 Taylor polynomial, times 2^n.
inline __m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(100.0f)), _mm512_set1_ps(-100.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

inline __m512 sigmoid_ps(__m512 z) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), z))));
}

// x / (1 + e^-x), the formula of src/model/activation.hpp.
inline __m512 silu_ps(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(x, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

// act(gate, up) for 16 (gate, up) pairs.
inline __m512 glu(__m512 g, __m512 u, const GluParams& p) {
  const __m512 limit = _mm512_set1_ps(p.limit);
  const __m512 neg_limit = _mm512_set1_ps(-p.limit);
  switch (p.fn) {
    case kGluSwigluOai: {
      g = _mm512_min_ps(g, limit);
      u = _mm512_max_ps(_mm512_min_ps(u, limit), neg_limit);
      const __m512 s = sigmoid_ps(_mm512_mul_ps(_mm512_set1_ps(p.alpha), g));
      return _mm512_mul_ps(_mm512_mul_ps(g, s), _mm512_add_ps(u, _mm512_set1_ps(1.0f)));
    }
    case kGluSiluClamp:
      g = _mm512_min_ps(g, limit);
      u = _mm512_max_ps(_mm512_min_ps(u, limit), neg_limit);
      return _mm512_mul_ps(silu_ps(g), u);
    default:  // kGluSilu
      return _mm512_mul_ps(silu_ps(g), u);
  }
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
