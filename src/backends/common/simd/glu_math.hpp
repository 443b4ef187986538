// The expert nonlinearities (src/model/activation.hpp) written once over a vector type, so
// the AVX-512 and the AVX2 kernels run the same float operations in the same order and give
// the same bits (the int8 backends' numerics class spans zmm and ymm machines). Include ONLY
// from headers that are themselves included by kernels/*.cpp (glu_avx512.hpp, glu_avx2.hpp):
// everything has internal linkage, so no body is shared through the linker between objects
// built with different ISA flags.
//
// V is a traits struct: V::vec, and static functions set1, add, sub, mul, div, min, max
// (the x86 semantics: the second operand when either is NaN), fmadd (a*b+c), fnmadd
// (-(a*b)+c), round_nearest (to the nearest integer, ties to even) and scale_pow2 (a * 2^n
// for integral n in [-150, 150], rounded once, as vscalefps).
#pragma once

#include "backends/common/simd/glu_params.hpp"

namespace mxmoe::simd {
namespace {

// e^x to about 1 ulp: x = n ln2 + r, |r| <= ln2/2, degree-7 Taylor polynomial, times 2^n.
template <class V>
inline typename V::vec exp_v(typename V::vec x) {
  x = V::max(V::min(x, V::set1(100.0f)), V::set1(-100.0f));
  const typename V::vec n = V::round_nearest(V::mul(x, V::set1(1.44269504088896341f)));
  typename V::vec r = V::fnmadd(n, V::set1(0.693145751953125f), x);
  r = V::fnmadd(n, V::set1(1.428606765330187045e-06f), r);
  typename V::vec p = V::set1(1.0f / 5040.0f);
  p = V::fmadd(p, r, V::set1(1.0f / 720.0f));
  p = V::fmadd(p, r, V::set1(1.0f / 120.0f));
  p = V::fmadd(p, r, V::set1(1.0f / 24.0f));
  p = V::fmadd(p, r, V::set1(1.0f / 6.0f));
  p = V::fmadd(p, r, V::set1(0.5f));
  p = V::fmadd(p, r, V::set1(1.0f));
  p = V::fmadd(p, r, V::set1(1.0f));
  return V::scale_pow2(p, n);
}

template <class V>
inline typename V::vec sigmoid_v(typename V::vec z) {
  const typename V::vec one = V::set1(1.0f);
  return V::div(one, V::add(one, exp_v<V>(V::sub(V::set1(0.0f), z))));
}

// x / (1 + e^-x), the formula of src/model/activation.hpp.
template <class V>
inline typename V::vec silu_v(typename V::vec x) {
  const typename V::vec one = V::set1(1.0f);
  return V::div(x, V::add(one, exp_v<V>(V::sub(V::set1(0.0f), x))));
}

// act(gate, up) for one vector of (gate, up) pairs.
template <class V>
inline typename V::vec glu_v(typename V::vec g, typename V::vec u, const GluParams& p) {
  const typename V::vec limit = V::set1(p.limit);
  const typename V::vec neg_limit = V::set1(-p.limit);
  switch (p.fn) {
    case kGluSwigluOai: {
      g = V::min(g, limit);
      u = V::max(V::min(u, limit), neg_limit);
      const typename V::vec s = sigmoid_v<V>(V::mul(V::set1(p.alpha), g));
      return V::mul(V::mul(g, s), V::add(u, V::set1(1.0f)));
    }
    case kGluSiluClamp:
      g = V::min(g, limit);
      u = V::max(V::min(u, limit), neg_limit);
      return V::mul(silu_v<V>(g), u);
    default:  // kGluSilu
      return V::mul(silu_v<V>(g), u);
  }
}

}  // namespace
}  // namespace mxmoe::simd
