// The lane trees of attention_dot8 (attention_kernels.hpp) for 8 keys at once, and its softmax's
// exponential on every lane, on x86
// (kernels/avx2, kernels/avx512). Include ONLY from kernels/*.cpp compiled with AVX2 flags or
// more; everything here has internal linkage (an unnamed namespace), so objects built with
// different ISA flags never share a body through the linker.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backends/dense/attention_kernels.hpp"

namespace mxmoe::dense {
namespace {

// One head's 8 keys in ymms: halves(a, b) = [a_i + a_{i+4} | b_i + b_{i+4}], i = 0..3.
struct Ymm {
  using V = __m256;
  static V add(V a, V b) noexcept { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) noexcept { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) noexcept { return _mm256_mul_ps(a, b); }
  static V set1(float v) noexcept { return _mm256_set1_ps(v); }
  static V fmadd(V a, V b, V c) noexcept { return _mm256_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) noexcept { return _mm256_fnmadd_ps(a, b, c); }
  // 2^n for whole n in [-126, 127], from its bits.
  static V pow2(V n) noexcept {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  // E where x >= LO, +0 where x < LO, and x itself where it is NaN.
  static V exp_edges(V x, V e, V lo) noexcept {
    e = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), e);
    return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  static V halves(V a, V b) noexcept {
    return add(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  }
  template <int I>
  static V shuffle(V a, V b) noexcept {
    return _mm256_shuffle_ps(a, b, I);
  }
};

#ifdef __AVX512F__
// Two heads' 8 keys in zmms, head h in the low 256 bits and h + 1 in the high ones:
// halves(a, b) = [a: h's a_i + a_{i+4} | a: h+1's | b: h's | b: h+1's].
struct Zmm {
  using V = __m512;
  static V add(V a, V b) noexcept { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) noexcept { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) noexcept { return _mm512_mul_ps(a, b); }
  static V set1(float v) noexcept { return _mm512_set1_ps(v); }
  static V fmadd(V a, V b, V c) noexcept { return _mm512_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) noexcept { return _mm512_fnmadd_ps(a, b, c); }
  static V pow2(V n) noexcept {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  static V exp_edges(V x, V e, V lo) noexcept {
    e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), _mm512_setzero_ps());
    return _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
  }
  static V halves(V a, V b) noexcept {
    return add(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
  }
  template <int I>
  static V shuffle(V a, V b) noexcept {
    return _mm512_shuffle_ps(a, b, I);
  }
};
#endif

// attention_exp (attention_kernels.hpp) on every lane: the same correctly rounded steps, the
// class's fma written as FMA instructions.
template <class S>
typename S::V exp_lanes(typename S::V x) noexcept {
  const auto round = S::set1(kExpRound);
  const auto n = S::sub(S::fmadd(x, S::set1(kExpLog2e), round), round);
  const auto r = S::fnmadd(n, S::set1(kExpLn2Lo), S::fnmadd(n, S::set1(kExpLn2Hi), x));
  auto p = S::set1(kExpTaylor[7]);
  for (int i = 6; i >= 0; --i) p = S::fmadd(p, r, S::set1(kExpTaylor[i]));
  return S::exp_edges(x, S::mul(p, S::pow2(n)), S::set1(kExpMin));
}

// ACC[j] holds key j's 8 lanes (per head); every 128-bit block of the result holds 4 keys'
// sums ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), the operands of dot8's tree in every
// lane: step 1 pairs keys (j, j + 4), s_i = l_i + l_{i+4}; step 2 gives each key
// t0 = s0 + s2 and t1 = s1 + s3; step 3 adds t0 + t1. For Ymm the result is keys 0..7 in
// order; for Zmm [h: keys 0..3 | h+1: keys 0..3 | h: keys 4..7 | h+1: keys 4..7].
template <class S>
typename S::V lane_trees(const typename S::V (&acc)[8]) noexcept {
  typename S::V x[4];  // [key j | key j + 4] per head
  for (int j = 0; j < 4; ++j) x[j] = S::halves(acc[j], acc[j + 4]);
  // [key 0: t0, t1, key 1: t0, t1] and [keys 2, 3] per 128 bits.
  const auto u0 =
      S::add(S::template shuffle<0x44>(x[0], x[1]), S::template shuffle<0xEE>(x[0], x[1]));
  const auto u1 =
      S::add(S::template shuffle<0x44>(x[2], x[3]), S::template shuffle<0xEE>(x[2], x[3]));
  return S::add(S::template shuffle<0x88>(u0, u1), S::template shuffle<0xDD>(u0, u1));
}

// The values kernels' loops: OUT zeroed, then the keys in blocks of 64 (their value rows stay in
// L1 while every head of the call reads them), the heads in groups of MAX_H (4 or 2), then 2,
// then 1: heads(std::integral_constant<int, H>, h0, p0, p1) adds keys [p0, p1) to heads
// [h0, h0 + H). Each (head, column) still adds its keys in increasing order.
template <int MaxH, class Heads>
void values_in_blocks(const AttentionValuesCall& c, Heads heads) noexcept {
  constexpr std::int64_t kBlock = 64;
  std::memset(
      c.out, 0,
      static_cast<std::size_t>(c.heads) * static_cast<std::size_t>(c.head_dim) * sizeof(float));
  for (std::int64_t p0 = 0; p0 < c.keys; p0 += kBlock) {
    const std::int64_t p1 = std::min(c.keys, p0 + kBlock);
    int h = 0;
    if constexpr (MaxH >= 4)
      for (; h + 4 <= c.heads; h += 4) heads(std::integral_constant<int, 4>{}, h, p0, p1);
    for (; h + 2 <= c.heads; h += 2) heads(std::integral_constant<int, 2>{}, h, p0, p1);
    if (h < c.heads) heads(std::integral_constant<int, 1>{}, h, p0, p1);
  }
}

}  // namespace
}  // namespace mxmoe::dense
