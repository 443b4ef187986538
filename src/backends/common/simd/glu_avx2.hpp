// The expert nonlinearities (glu_math.hpp) on 8 floats with AVX2 + FMA: the same operations
// as glu_avx512.hpp, so the results are the same bits. Include ONLY from kernels/*.cpp
// compiled with AVX2 flags; internal linkage, as glu_avx512.hpp.
#pragma once

#include <immintrin.h>

#include "backends/common/simd/glu_math.hpp"
#include "backends/common/simd/glu_params.hpp"

namespace mxmoe::simd {
namespace {

// The vector operations of glu_math.hpp on 8 floats.
struct Ymm {
  using vec = __m256;
  static vec set1(float v) { return _mm256_set1_ps(v); }
  static vec add(vec a, vec b) { return _mm256_add_ps(a, b); }
  static vec sub(vec a, vec b) { return _mm256_sub_ps(a, b); }
  static vec mul(vec a, vec b) { return _mm256_mul_ps(a, b); }
  static vec div(vec a, vec b) { return _mm256_div_ps(a, b); }
  static vec min(vec a, vec b) { return _mm256_min_ps(a, b); }
  static vec max(vec a, vec b) { return _mm256_max_ps(a, b); }
  static vec fmadd(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
  static vec fnmadd(vec a, vec b, vec c) { return _mm256_fnmadd_ps(a, b, c); }
  static vec round_nearest(vec a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // vscalefps without AVX-512: a * 2^n1 * 2^n2 with n1 = floor(n / 2), n2 = n - n1, both in
  // [-75, 75], so 2^n1 and 2^n2 are normal floats built from bits. For the |a| in [0.5, 2) of
  // exp_v the first product is exact (a normal float), so the second rounds once: the same
  // result as vscalefps, subnormal and overflowing ones included.
  static vec scale_pow2(vec a, vec n) {
    const __m256i k = _mm256_cvtps_epi32(n);  // n is integral: exact
    const __m256i k1 = _mm256_srai_epi32(k, 1);
    const __m256i k2 = _mm256_sub_epi32(k, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(a, p1), p2);
  }
};

// act(gate, up) for 8 (gate, up) pairs.
inline __m256 glu(__m256 g, __m256 u, const GluParams& p) {
  return glu_v<Ymm>(g, u, p);
}

// One row of a 32-unit GEMM1 result, 64 floats [gate 0-15 | up 0-15 | gate 16-31 | up 16-31]
// (no bias): a[q] = act(gate + gate_bias, up + up_bias) for units 8q .. 8q+7.
inline void glu_row32(const float* row, const float* gate_bias, const float* up_bias,
                      const GluParams& p, __m256 (&a)[4]) {
  for (int q = 0; q < 4; ++q) {
    const int gate_at = 32 * (q / 2) + 8 * (q % 2);  // gate units 8q.. in the row's layout
    a[q] = glu(_mm256_add_ps(_mm256_loadu_ps(row + gate_at), _mm256_loadu_ps(gate_bias + 8 * q)),
               _mm256_add_ps(_mm256_loadu_ps(row + gate_at + 16), _mm256_loadu_ps(up_bias + 8 * q)),
               p);
  }
}

}  // namespace
}  // namespace mxmoe::simd
