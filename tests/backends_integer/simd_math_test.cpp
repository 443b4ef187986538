// The nonlinearity math on ymm (glu_avx2.hpp) against zmm (glu_avx512.hpp), bit for bit: the
// int8 class's GLU must be the same function on both. The shared formulas are one template
// (glu_math.hpp); what differs is vscalefps, which AVX2 emulates by two exact power-of-two
// multiplies, so that is tested over its whole domain, and e^x over every input range (the
// clamp at +-100, overflow to Inf, results in the subnormals, NaN).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "mxmoe/hardware.hpp"

// Only the functions below are compiled for AVX-512 / AVX2 (everything included here has
// internal linkage); the tests call them after checking the CPU.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "backends/common/simd/glu_avx2.hpp"
#include "backends/common/simd/glu_avx512.hpp"

namespace {

using mxmoe::simd::GluParams;
using mxmoe::simd::Ymm;
using mxmoe::simd::Zmm;

// Each over count (a multiple of 16) floats, 16 at a time on zmm, 8 at a time on ymm.
void scale_zmm(const float* a, const float* n, float* out, std::size_t count) {
  for (std::size_t i = 0; i < count; i += 16)
    _mm512_storeu_ps(out + i, Zmm::scale_pow2(_mm512_loadu_ps(a + i), _mm512_loadu_ps(n + i)));
}
void scale_ymm(const float* a, const float* n, float* out, std::size_t count) {
  for (std::size_t i = 0; i < count; i += 8)
    _mm256_storeu_ps(out + i, Ymm::scale_pow2(_mm256_loadu_ps(a + i), _mm256_loadu_ps(n + i)));
}
void exp_zmm(const float* x, float* out, std::size_t count) {
  for (std::size_t i = 0; i < count; i += 16)
    _mm512_storeu_ps(out + i, mxmoe::simd::exp_v<Zmm>(_mm512_loadu_ps(x + i)));
}
void exp_ymm(const float* x, float* out, std::size_t count) {
  for (std::size_t i = 0; i < count; i += 8)
    _mm256_storeu_ps(out + i, mxmoe::simd::exp_v<Ymm>(_mm256_loadu_ps(x + i)));
}
void glu_zmm(const float* g, const float* u, const GluParams& p, float* out, std::size_t count) {
  for (std::size_t i = 0; i < count; i += 16)
    _mm512_storeu_ps(out + i,
                     mxmoe::simd::glu_v<Zmm>(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i), p));
}
void glu_ymm(const float* g, const float* u, const GluParams& p, float* out, std::size_t count) {
  for (std::size_t i = 0; i < count; i += 8)
    _mm256_storeu_ps(out + i,
                     mxmoe::simd::glu_v<Ymm>(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i), p));
}

}  // namespace
#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace {

bool has_both() {
  static const mxmoe::IsaFeatures isa = mxmoe::probe_hardware().isa;
  return isa.avx512f && isa.avx2 && isa.fma;
}

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = std::bit_cast<std::uint32_t>(v[i]);
  return b;
}

std::vector<float> pad16(std::vector<float> v) {
  while (v.size() % 16 != 0) v.push_back(0.0f);
  return v;
}

// Every mantissa pattern the polynomial can produce lies in [0.5, 2); exponents -150..150
// cover overflow, the normal range, every subnormal result and underflow to zero.
TEST(SimdMath, AvxScalePow2IsVscalefps) {
  if (!has_both()) GTEST_SKIP() << "needs AVX-512F and AVX2 to compare";
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> mantissa(0.5f, 2.0f);
  std::vector<float> a, n;
  for (int e = -150; e <= 150; ++e) {
    for (int i = 0; i < 64; ++i) {
      const float m = i == 0 ? 0.5f : (i == 1 ? std::nextafter(2.0f, 0.0f) : mantissa(rng));
      a.push_back(i % 2 ? -m : m);
      n.push_back(static_cast<float>(e));
    }
  }
  std::vector<float> want(a.size()), got(a.size());
  scale_zmm(a.data(), n.data(), want.data(), a.size());
  scale_ymm(a.data(), n.data(), got.data(), a.size());
  EXPECT_EQ(bits(got), bits(want));
  // And both are a * 2^n rounded once, as std::ldexp computes it (an independent reference).
  std::vector<float> exact(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) exact[i] = std::ldexp(a[i], static_cast<int>(n[i]));
  EXPECT_EQ(bits(want), bits(exact));
}

TEST(SimdMath, ExpOnYmmGivesTheZmmBits) {
  if (!has_both()) GTEST_SKIP() << "needs AVX-512F and AVX2 to compare";
  std::vector<float> x;
  for (float v = -110.0f; v <= 110.0f; v += 0.0137f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-38f, NAN, -NAN, INFINITY, -INFINITY, 3.4e38f,
                  -3.4e38f, 88.72f, 88.73f, -87.3f, -103.2f, -100.0f, 100.0f})
    x.push_back(v);
  x = pad16(x);
  std::vector<float> want(x.size()), got(x.size());
  exp_zmm(x.data(), want.data(), x.size());
  exp_ymm(x.data(), got.data(), x.size());
  EXPECT_EQ(bits(got), bits(want));
}

TEST(SimdMath, GluOnYmmGivesTheZmmBits) {
  if (!has_both()) GTEST_SKIP() << "needs AVX-512F and AVX2 to compare";
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_int_distribution<int> scale(-20, 8);
  std::vector<float> g, u;
  for (int i = 0; i < 4096; ++i) {
    g.push_back(std::ldexp(dist(rng), scale(rng)) * 16.0f);
    u.push_back(std::ldexp(dist(rng), scale(rng)) * 16.0f);
  }
  const float specials[] = {NAN,    INFINITY, -INFINITY, 7.0f,  -7.0f, 3.4e38f, -3.4e38f,
                            1e-45f, -60.0f,   -95.0f,    95.0f, 0.0f,  -0.0f};
  for (float a : specials)
    for (float b : specials) g.push_back(a), u.push_back(b);
  g = pad16(g);
  u = pad16(u);
  for (const int fn :
       {mxmoe::simd::kGluSwigluOai, mxmoe::simd::kGluSilu, mxmoe::simd::kGluSiluClamp}) {
    SCOPED_TRACE(fn);
    const GluParams p{fn, 1.702f, 7.0f};
    std::vector<float> want(g.size()), got(g.size());
    glu_zmm(g.data(), u.data(), p, want.data(), g.size());
    glu_ymm(g.data(), u.data(), p, got.data(), g.size());
    EXPECT_EQ(bits(got), bits(want));
  }
}

}  // namespace
