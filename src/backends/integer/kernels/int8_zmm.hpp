// What the int8 class's AVX-512 kernels (kernels/avx512_vnni/ and kernels/amx_int8/) share,
// written once. Included only by those sources; everything has internal linkage, so the two
// objects (built with different flags) share no body.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace mxmoe::int8_kernels {
namespace {

// 2^(e - 128) for 16 E8M0 bytes, exactly: biased exponent e-1 for e >= 2, the subnormals
// 2^-128 and 2^-127 for e = 0 and 1 (bits 1 << (21 + e)).
inline __m512 weight_scales(const std::uint8_t* e8m0) {
  const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e8m0)));
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, one), 23);
  const __m512i subnormal = _mm512_sllv_epi32(one, _mm512_add_epi32(e, _mm512_set1_epi32(21)));
  const __mmask16 tiny = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(tiny, normal, subnormal));
}

}  // namespace
}  // namespace mxmoe::int8_kernels
