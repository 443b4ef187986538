// The halving tree of the 16 lanes on x86 (kernels/avx2, avx512, avx512_vnni). Include ONLY from
// kernels/*.cpp compiled with AVX2 flags or more; everything here has internal linkage (an unnamed
// namespace), so objects built with different ISA flags never share a body through the linker.
#pragma once

#include <immintrin.h>

#include "backends/dense/tiles.hpp"

namespace mxmoe::dense {
namespace {

// The halving tree on lanes 0-7 (lo) and 8-15 (hi): s8 = lo + hi, s4 = s8[0..3] + s8[4..7],
// s2 = s4[0..1] + s4[2..3], s2[0] + s2[1].
float reduce16(__m256 lo, __m256 hi) noexcept {
  const __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#ifdef __AVX512F__
float reduce16(__m512 v) noexcept {
  return reduce16(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
}
#endif

}  // namespace
}  // namespace mxmoe::dense
