// dense::Linear (src/backends/dense): every kernel this CPU runs against a float64 reference
// with a bound derived from K and the element precision; identical bits within a numerics
// class (every ISA kernel and the portable one that defines the class); batch invariance at
// 1 and 2 threads; the bias; odd shapes; the oracle's verdicts (mxmoe::Verdict) under a cap
// and its choice on every Hardware; hostile construction refused naming the tensor.
#include "backends/dense/dense_linear.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/thread_pool.hpp"
#include "mxmoe/format.hpp"
#include "runtime/bind_linear.hpp"
#include "test_platform.hpp"

namespace {

using mxmoe::ElementType;
using mxmoe::Hardware;
using mxmoe::ThreadPool;
using mxmoe::dense::DenseMode;
using mxmoe::dense::Linear;
using mxmoe::dense::LinearWeights;

// How a layer is asked: its mode and the pool of the compact packing.
struct Options {
  DenseMode mode = DenseMode::as_published;
  ThreadPool* pack_pool = nullptr;
};

// As the decoder binds a layer: the oracle judges the mode's kernels, the Linear binds.
Linear bound(const LinearWeights& w, const Hardware& hw, Options o = {}) {
  return mxmoe::bind_linear(w, o.mode, hw, o.pack_pool);
}

constexpr double kUnit = 1.0 / (1 << 24);  // f32 unit roundoff
constexpr DenseMode kModes[] = {DenseMode::as_published, DenseMode::as_published_bf16,
                                DenseMode::compact_int8, DenseMode::compact_int4};

// Whether MODE's kernels take a layer of E weights and input size IN at all.
bool accepts(DenseMode mode, ElementType e, std::int64_t in) {
  if (mode == DenseMode::as_published_bf16)
    return e == ElementType::bf16 && in <= mxmoe::dense::kBf16MaxIn;
  return !mxmoe::dense::is_compact(mode) || in <= mxmoe::dense::kCompactMaxIn;
}

// A layer's bytes: bf16 or f32 weights of normal values with a few hostile ones.
struct Layer {
  std::vector<std::uint16_t> bf16;
  std::vector<float> f32, bias;
  LinearWeights weights(ElementType e, bool with_bias) const {
    LinearWeights w;
    w.name = "blk.0.attn_q.weight";
    w.element = e;
    w.data = e == ElementType::bf16 ? static_cast<const void*>(bf16.data()) : f32.data();
    w.out = out;
    w.in = in;
    if (with_bias) w.bias = bias.data();
    return w;
  }
  std::int64_t out = 0, in = 0;
  // The weight as the kernels see it (bf16 widens exactly).
  double at(ElementType e, std::int64_t o, std::int64_t k) const {
    const auto i = static_cast<std::size_t>(o * in + k);
    return e == ElementType::bf16 ? mxmoe::bf16_to_f32(bf16[i]) : f32[i];
  }
};

Layer make_layer(std::int64_t out, std::int64_t in, unsigned seed, bool hostile = false) {
  Layer l;
  l.out = out;
  l.in = in;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  l.f32.resize(static_cast<std::size_t>(out * in));
  for (float& v : l.f32) v = normal(rng);
  if (hostile && l.f32.size() > 8) {
    l.f32[1] = 1e-40f;  // subnormal
    l.f32[3] = 3e20f;   // huge
    l.f32[5] = -0.0f;
    l.f32[7] = -2e-39f;
  }
  for (const float v : l.f32) l.bf16.push_back(mxmoe::f32_to_bf16(v));
  for (std::int64_t o = 0; o < out; ++o) l.bias.push_back(normal(rng));
  return l;
}

std::vector<float> make_x(std::int64_t m, std::int64_t in, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(m * in));
  for (float& v : x) v = normal(rng);
  return x;
}

std::vector<float> run(const Linear& lin, const std::vector<float>& x, std::int64_t m,
                       int threads) {
  ThreadPool pool(threads);
  std::vector<float> y(static_cast<std::size_t>(m * lin.out()), std::nanf(""));
  lin.forward(x.data(), m, y.data(), pool);
  return y;
}

// The Hardware variants that pick each kernel of a mode this CPU runs: the probe, capped at
// avx2, and with no features at all (the portable kernel).
std::vector<Hardware> hardware_variants() {
  std::vector<Hardware> out{mxmoe::probe_hardware()};
  if (kX86BackendsCompiled) out.push_back(mxmoe::probe_hardware("avx2"));
  Hardware bare = mxmoe::probe_hardware();
  bare.isa = mxmoe::cap_isa(bare.isa, "none");
  out.push_back(bare);
  return out;
}

TEST(DenseLinear, Fp32MatchesFloat64WithinTheAccumulationBound) {
  // A sum of K products in 16 lanes of K/16 FMAs, then 4 tree levels, then the bias: each
  // output is within (K/16 + 6) u sum|w x| (+ u |bias|) of the exact sum, u = 2^-24.
  for (const std::int64_t in : {1, 15, 16, 17, 100, 2880}) {
    const std::int64_t out = 37, m = 9;
    const Layer layer = make_layer(out, in, static_cast<unsigned>(in));
    const std::vector<float> x = make_x(m, in, 5);
    for (const ElementType e : {ElementType::bf16, ElementType::f32})
      for (const Hardware& hw : hardware_variants()) {
        const Linear lin = bound(layer.weights(e, true), hw);
        const std::vector<float> y = run(lin, x, m, 2);
        const double lanes_bound = static_cast<double>(in / 16 + 6) * kUnit;
        for (std::int64_t t = 0; t < m; ++t)
          for (std::int64_t o = 0; o < out; ++o) {
            double exact = 0, magnitude = 0;
            for (std::int64_t k = 0; k < in; ++k) {
              const double p = layer.at(e, o, k) * double{x[static_cast<std::size_t>(t * in + k)]};
              exact += p;
              magnitude += std::fabs(p);
            }
            const double b = layer.bias[static_cast<std::size_t>(o)];
            const double bound =
                lanes_bound * magnitude + 2 * kUnit * (std::fabs(exact) + std::fabs(b));
            EXPECT_NEAR(y[static_cast<std::size_t>(t * out + o)], exact + b, bound)
                << lin.kernel_name() << " in " << in << " row " << o << " token " << t;
          }
      }
  }
}

TEST(DenseLinear, CompactMatchesFloat64WithinTheQuantizationBound) {
  // int8: each code is within 0.5 step (+ the rounding of v * 127 / amax: 0.51) of its value,
  // a step being d = amax / 127 of its block. int4 weights: within half a step d = |m| / 8 (d
  // rounded to bf16: within 2^-9 of itself), except where v / d passes 7.5 and clamps to 7: at
  // most one step (v = -m), so 1.01 d. So |w x - w~ x~| <= kw dw |x~| + 0.51 dx |w| per element
  // (x~ = x + at most 0.51 dx), plus f32 accumulation as in the fp32 test.
  struct Class {
    DenseMode mode;
    double levels, kw;  // dw = amax / levels; a weight within kw dw
  };
  const std::int64_t out = 33, m = 5;
  for (const Class q : {Class{DenseMode::compact_int8, 127, 0.51}, Class{DenseMode::compact_int4, 8, 1.01}})
    for (const std::int64_t in : {7, 32, 33, 96, 2880}) {
      const Layer layer = make_layer(out, in, 3u + static_cast<unsigned>(in));
      const std::vector<float> x = make_x(m, in, 9);
      for (const Hardware& hw : hardware_variants()) {
        const Linear lin = bound(layer.weights(ElementType::bf16, false), hw, {q.mode, nullptr});
        const std::vector<float> y = run(lin, x, m, 2);
        double worst = 0;  // the largest error as a fraction of its bound
        for (std::int64_t t = 0; t < m; ++t)
          for (std::int64_t o = 0; o < out; ++o) {
            double exact = 0, bound = 0;
            for (std::int64_t b0 = 0; b0 < in; b0 += 32) {
              const std::int64_t b1 = std::min(in, b0 + 32);
              double wmax = 0, xmax = 0;
              for (std::int64_t k = b0; k < b1; ++k) {
                wmax = std::max(wmax, std::fabs(layer.at(ElementType::bf16, o, k)));
                xmax = std::max(xmax, std::fabs(double{x[static_cast<std::size_t>(t * in + k)]}));
              }
              const double dw = wmax / q.levels, dx = xmax / 127;
              for (std::int64_t k = b0; k < b1; ++k) {
                const double wv = layer.at(ElementType::bf16, o, k);
                const double xv = double{x[static_cast<std::size_t>(t * in + k)]};
                exact += wv * xv;
                bound += q.kw * dw * (std::fabs(xv) + 0.51 * dx) + 0.51 * dx * std::fabs(wv) +
                         static_cast<double>(in / 16 + 8) * kUnit * (std::fabs(wv) + dw) *
                             (std::fabs(xv) + dx);
              }
            }
            const double got = y[static_cast<std::size_t>(t * out + o)];
            EXPECT_NEAR(got, exact, bound)
                << lin.kernel_name() << " in " << in << " row " << o << " token " << t;
            worst = std::max(worst, std::fabs(got - exact) / bound);
          }
        // Nor is the bound slack by orders of magnitude: a sum of 96+ independent errors sits
        // well inside it, but not at nothing (a kernel that ignored the codes' low bits would
        // sit at zero relative error only by chance).
        if (in >= 96) {
          EXPECT_GT(worst, 0.005) << lin.kernel_name() << " in " << in;
        }
      }
    }
}

// dense_int4_rows16's weight codes on hand-worked blocks (linear_kernels.hpp): d = bf16(m / -8)
// for m the first element of largest magnitude, codes round half to even and clamp to [-8, 7].
TEST(DenseLinear, Int4WeightCodesFollowTheClassRule) {
  using mxmoe::dense::quantize_block32_int4;
  std::int8_t codes[32];
  // m = -2 (the first of |-2| and |2|): d = 0.25; 2 / d = 8 clamps to 7; 0.375 / d = 1.5 and
  // 0.625 / d = 2.5 both round to 2 (half to even); a NaN is -8; the rest of the block zero.
  const float v[] = {1.0f, -2.0f, 0.5f, 2.0f, 0.375f, 0.625f, std::nanf(""), -0.1f};
  const std::uint16_t d = quantize_block32_int4(v, 8, codes);
  EXPECT_EQ(mxmoe::bf16_to_f32(d), 0.25f);
  const std::int8_t want[] = {4, -8, 2, 7, 2, 2, -8, 0};  // -0.1 / 0.25 = -0.4 -> 0
  for (int k = 0; k < 8; ++k) EXPECT_EQ(codes[k], want[k]) << "element " << k;
  for (int k = 8; k < 32; ++k) EXPECT_EQ(codes[k], 0) << "element " << k;
  // A positive m gives a negative d: m itself is code -8 exactly.
  const float p[] = {3.0f, -1.5f};
  EXPECT_EQ(mxmoe::bf16_to_f32(quantize_block32_int4(p, 2, codes)), -0.375f);
  EXPECT_EQ(codes[0], -8);
  EXPECT_EQ(codes[1], 4);
  // d rounded to bf16 first: m = 1 + 2^-7 + 2^-9 gives d = -(1 + 2^-7) / 8 (round half... up
  // to the nearest bf16), and the codes are made against that d.
  const float r[] = {1.0f + 0x1p-7f + 0x1p-9f, 0.5f};
  const float dr = mxmoe::bf16_to_f32(quantize_block32_int4(r, 2, codes));
  EXPECT_EQ(dr, mxmoe::bf16_to_f32(mxmoe::f32_to_bf16(r[0] / -8.0f)));
  EXPECT_EQ(codes[0], -8);
  EXPECT_EQ(codes[1], static_cast<std::int8_t>(std::nearbyint(0.5f / dr)));
  // Blocks with no usable scale are all zero with d = 0: zeros, a subnormal d, an infinite m.
  for (const float m : {0.0f, 1e-39f, 4e-38f, std::numeric_limits<float>::infinity()}) {
    const float z[] = {m, -m / 2, 0.0f};
    EXPECT_EQ(quantize_block32_int4(z, 3, codes), 0) << m;
    for (int k = 0; k < 32; ++k) ASSERT_EQ(codes[k], 0) << m;
  }
}

TEST(DenseLinear, Bf16ActivationsMatchFloat64WithinTheRoundingBound) {
  // x rounded to bf16 (8 significant bits, round half to even) moves each product by at most
  // 2^-8 |w x| (x normal);
  // then the rounded products are summed as in the fp32 class but with two FMAs a lane a
  // step: (2 ceil(K/32) + 6) u sum|w x~| for the sum and the tree, 2 u for the bias.
  for (const std::int64_t in : {1, 15, 31, 32, 33, 100, 2880}) {
    const std::int64_t out = 37, m = 9;
    const Layer layer = make_layer(out, in, 11u + static_cast<unsigned>(in));
    const std::vector<float> x = make_x(m, in, 6);
    for (const Hardware& hw : hardware_variants()) {
      const Linear lin = bound(layer.weights(ElementType::bf16, true), hw,
                               {DenseMode::as_published_bf16, nullptr});
      const std::vector<float> y = run(lin, x, m, 2);
      const double sum_bound = static_cast<double>(2 * ((in + 31) / 32) + 6) * kUnit;
      for (std::int64_t t = 0; t < m; ++t)
        for (std::int64_t o = 0; o < out; ++o) {
          double exact = 0, magnitude = 0;
          for (std::int64_t k = 0; k < in; ++k) {
            const double p =
                layer.at(ElementType::bf16, o, k) * double{x[static_cast<std::size_t>(t * in + k)]};
            exact += p;
            magnitude += std::fabs(p);
          }
          const double b = layer.bias[static_cast<std::size_t>(o)];
          const double bound = (1.0 / 256) * magnitude + sum_bound * magnitude * (1 + 1.0 / 256) +
                               2 * kUnit * (std::fabs(exact) + std::fabs(b));
          EXPECT_NEAR(y[static_cast<std::size_t>(t * out + o)], exact + b, bound)
              << lin.kernel_name() << " in " << in << " row " << o << " token " << t;
        }
    }
  }
}

// dense_bf16_pairs16's definition (the portable kernel) is vdpbf16ps's arithmetic over the
// whole exponent range: subnormal bf16 weights and activations (read as zero), products whose
// sums underflow (flushed), and values up to 2^40, at every tail length of a step.
TEST(DenseLinear, Bf16ClassBitsHoldOverTheWholeExponentRange) {
  std::mt19937 rng(17);
  // Exponents in [-140, 40]: subnormal and large values mixed; in [-140, -50]: whole sums of
  // tiny products, whose results fall in the subnormal range and are flushed.
  for (const int top : {40, -50})
    for (const std::int64_t in : {2, 31, 32, 33, 63, 64, 96}) {
      const std::int64_t out = 11, m = 7;
      Layer layer;
      layer.out = out;
      layer.in = in;
      std::vector<float> x(static_cast<std::size_t>(m * in));
      // A value of random sign and mantissa with exponent in [-140, top].
      const auto value = [&] {
        const int e = -140 + static_cast<int>(rng() % static_cast<unsigned>(top + 141));
        const float mantissa = 1.0f + static_cast<float>(rng() % 128) / 128.0f;
        return std::ldexp(rng() % 2 ? -mantissa : mantissa, e);
      };
      for (std::int64_t i = 0; i < out * in; ++i) layer.bf16.push_back(mxmoe::f32_to_bf16(value()));
      for (std::int64_t o = 0; o < out; ++o) layer.bias.push_back(0.0f);
      for (float& v : x) v = value() * (1.0f + static_cast<float>(rng() % 1024) / 8192.0f);
      const std::vector<Hardware> variants = hardware_variants();
      const Linear portable = bound(layer.weights(ElementType::bf16, false), variants.back(),
                                    {DenseMode::as_published_bf16});
      const std::vector<float> want = run(portable, x, m, 1);
      for (std::size_t v = 0; v + 1 < variants.size(); ++v) {
        const Linear lin = bound(layer.weights(ElementType::bf16, false), variants[v],
                                 {DenseMode::as_published_bf16});
        const std::vector<float> got = run(lin, x, m, 2);
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
              << lin.kernel_name() << " in " << in << " top " << top << " output " << i << ": "
              << got[i] << " vs " << want[i];
      }
    }
}

// Every kernel of a class gives the portable kernel's bits, on hostile values and odd shapes
// (the longest compact row too: a tile of 8 tokens of it fills the kernels' stack buffers).
TEST(DenseLinear, EveryKernelOfAClassGivesThePortableBits) {
  for (const DenseMode mode : kModes)
    for (const std::int64_t in : std::vector<std::int64_t>{1, 17, 31, 32, 33, 64, 65, 250, 2880,
                                                           mxmoe::dense::kBf16MaxIn,
                                                           mxmoe::dense::kCompactMaxIn})
      for (const ElementType e : {ElementType::bf16, ElementType::f32}) {
        if (!accepts(mode, e, in)) continue;
        const std::int64_t out = 19, m = 13;
        const Layer layer = make_layer(out, in, 7u * static_cast<unsigned>(in), true);
        std::vector<float> x = make_x(m, in, 1);
        x[0] = 1e-39f;
        if (x.size() > 20) x[20] = -7e15f;
        const std::vector<Hardware> variants = hardware_variants();
        const Linear portable = bound(layer.weights(e, true), variants.back(), {mode, nullptr});
        ASSERT_EQ(std::string(portable.kernel_name()).rfind("portable", 0), 0u);
        const std::vector<float> want = run(portable, x, m, 1);
        for (std::size_t v = 0; v + 1 < variants.size(); ++v) {
          const Linear lin = bound(layer.weights(e, true), variants[v], {mode, nullptr});
          EXPECT_EQ(lin.selection().candidates.front().numerics_class,
                    portable.selection().candidates.back().numerics_class);
          const std::vector<float> got = run(lin, x, m, 2);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
              << lin.kernel_name() << " vs " << portable.kernel_name() << " in " << in
              << (e == ElementType::bf16 ? " bf16" : " f32");
        }
      }
}

// A token's outputs have the same bits alone and at every position of a batch of 1..33
// tokens, at 1 and 2 threads, for every kernel this CPU runs.
TEST(DenseLinear, BatchInvariant) {
  const std::int64_t out = 45, in = 160;
  const Layer layer = make_layer(out, in, 21);
  const std::vector<float> batch = make_x(33, in, 4);
  for (const DenseMode mode : kModes)
    for (const Hardware& hw : hardware_variants()) {
      const Linear lin = bound(layer.weights(ElementType::bf16, true), hw, {mode, nullptr});
      std::vector<std::vector<float>> alone;
      for (std::int64_t t = 0; t < 33; ++t)
        alone.push_back(run(lin, {batch.begin() + t * in, batch.begin() + (t + 1) * in}, 1, 1));
      for (const int threads : {1, 2})
        for (std::int64_t m = 1; m <= 33; ++m) {
          const std::vector<float> y = run(lin, batch, m, threads);
          for (std::int64_t t = 0; t < m; ++t)
            ASSERT_EQ(std::memcmp(y.data() + t * out, alone[static_cast<std::size_t>(t)].data(),
                                  out * sizeof(float)),
                      0)
                << lin.kernel_name() << " token " << t << " of " << m << ", " << threads
                << " threads";
        }
    }
}

// One job for several layers of one input (the decoder's q, k and v): each output has the bits
// of its layer's own forward, whichever layer a task falls in, at 1 and 2 threads, and at token
// counts that take each split of rows_per_task (1 token, a decode batch, a prefill).
TEST(DenseLinear, ForwardTogetherGivesEachLayerItsOwnBits) {
  const std::int64_t in = 160;
  // Six layers: more than one job takes (kMaxTogether), so the second job's numbering counts.
  const std::vector<Layer> layers{make_layer(45, in, 31), make_layer(16, in, 32),
                                  make_layer(300, in, 33), make_layer(17, in, 34),
                                  make_layer(64, in, 35), make_layer(33, in, 36)};
  static_assert(Linear::kMaxTogether < 6);
  for (const DenseMode mode : kModes)
    for (const Hardware& hw : hardware_variants()) {
      std::vector<Linear> lins;
      for (const Layer& l : layers)
        lins.push_back(bound(l.weights(ElementType::bf16, true), hw, {mode, nullptr}));
      std::vector<const Linear*> ptrs;
      for (const Linear& l : lins) ptrs.push_back(&l);
      for (const std::int64_t m : {1, 5, 40})
        for (const int threads : {1, 2}) {
          const std::vector<float> x = make_x(m, in, 7);
          std::vector<std::vector<float>> ys;
          for (const Linear& l : lins)
            ys.emplace_back(static_cast<std::size_t>(m * l.out()), std::nanf(""));
          std::vector<float*> outs;
          for (std::vector<float>& y : ys) outs.push_back(y.data());
          ThreadPool pool(threads);
          Linear::forward_together(ptrs, x.data(), m, outs, pool);
          for (std::size_t i = 0; i < lins.size(); ++i) {
            const std::vector<float> alone = run(lins[i], x, m, threads);
            ASSERT_EQ(std::memcmp(ys[i].data(), alone.data(), alone.size() * sizeof(float)), 0)
                << lins[i].kernel_name() << " layer " << i << ", " << m << " tokens, " << threads
                << " threads";
          }
        }
    }
}

TEST(DenseLinear, BiasIsAddedOnceInF32OrBf16) {
  const Layer layer = make_layer(21, 48, 8);
  const std::vector<float> x = make_x(3, 48, 2);
  std::vector<std::uint16_t> bias16(layer.bias.size());
  for (std::size_t i = 0; i < bias16.size(); ++i) bias16[i] = mxmoe::f32_to_bf16(layer.bias[i]);
  for (const DenseMode mode : kModes) {
    const Hardware hw = mxmoe::probe_hardware();
    const std::vector<float> plain =
        run(bound(layer.weights(ElementType::bf16, false), hw, {mode, nullptr}), x, 3, 2);
    const std::vector<float> with =
        run(bound(layer.weights(ElementType::bf16, true), hw, {mode, nullptr}), x, 3, 2);
    LinearWeights w16 = layer.weights(ElementType::bf16, false);
    w16.bias = bias16.data();
    w16.bias_element = ElementType::bf16;
    const std::vector<float> with16 = run(bound(w16, hw, {mode, nullptr}), x, 3, 2);
    for (std::size_t i = 0; i < plain.size(); ++i) {
      EXPECT_EQ(with[i], plain[i] + layer.bias[i % 21]);
      EXPECT_EQ(with16[i], plain[i] + mxmoe::bf16_to_f32(bias16[i % 21]));
    }
  }
}

TEST(DenseLinear, CompactOwnsItsCopy) {
  Layer layer = make_layer(40, 96, 12);
  const std::vector<float> x = make_x(2, 96, 6);
  ThreadPool pack(2);
  const Linear lin = bound(layer.weights(ElementType::bf16, true), mxmoe::probe_hardware(),
                   {DenseMode::compact_int8, &pack});
  const std::vector<float> before = run(lin, x, 2, 2);
  std::fill(layer.bf16.begin(), layer.bf16.end(), std::uint16_t{0x7fc0});  // NaN
  std::fill(layer.bias.begin(), layer.bias.end(), std::nanf(""));
  const std::vector<float> after = run(lin, x, 2, 2);
  EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)), 0);
  // 3 groups of 16 rows (the last 8 rows padding), 3 blocks, each 16 x 32 codes + 16 scales.
  EXPECT_EQ(lin.weight_bytes(), 3u * 3 * (16 * 32 + 16 * 4));
  // int4: the same groups and blocks, each 16 x 32 nibbles + 16 bf16 scales.
  const Linear lin4 = bound(make_layer(40, 96, 12).weights(ElementType::bf16, true),
                            mxmoe::probe_hardware(), {DenseMode::compact_int4, &pack});
  EXPECT_EQ(lin4.weight_bytes(), 3u * 3 * (16 * 32 / 2 + 16 * 2));
}

TEST(DenseLinear, SelectionKeepsEveryVerdictAndACapChangesIt) {
  MXMOE_REQUIRE_X86_BACKENDS();
  const Layer layer = make_layer(16, 64, 1);
  const Hardware full = mxmoe::probe_hardware();
  if (!mxmoe::isa_feature(full.isa, "avx512f").value_or(false)) GTEST_SKIP() << "no AVX-512";
  const Linear fast = bound(layer.weights(ElementType::bf16, false), full);
  EXPECT_STREQ(fast.kernel_name(), "avx512_fp32");
  const Linear capped = bound(layer.weights(ElementType::bf16, false), mxmoe::probe_hardware("avx2"));
  EXPECT_STREQ(capped.kernel_name(), "avx2_fp32");
  const std::vector<mxmoe::Verdict>& c = capped.selection().candidates;
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].name, "avx512_fp32");
  ASSERT_FALSE(c[0].supported);
  for (const mxmoe::Rejection& r : c[0].reasons) {
    EXPECT_EQ(r.code, mxmoe::ReasonCode::unsupported_isa);
    EXPECT_NE(r.actual.find("capped at 'avx2'"), std::string::npos) << r.actual;
  }
  EXPECT_EQ(c[0].reasons.size(), 4u);  // avx512f, bw, vl, dq: every one
  EXPECT_TRUE(c[1].supported);
  EXPECT_EQ(c[2].name, "neon_fp32");
  ASSERT_EQ(c[2].reasons.size(), 2u);  // not compiled here, and no asimd on this CPU
  EXPECT_EQ(c[2].reasons[0].code, mxmoe::ReasonCode::not_compiled);
  EXPECT_TRUE(c[3].supported);
  EXPECT_LT(c[1].estimated_us, c[3].estimated_us);
  EXPECT_EQ(capped.selection().why.rfind("lowest estimated cost: ", 0), 0u)
      << capped.selection().why;
  const std::string text = describe(capped.selection(), "blk.0.attn_q.weight");
  EXPECT_NE(text.find("avx2_fp32 [dense_fp32_lanes16]: chosen"), std::string::npos) << text;
  EXPECT_NE(text.find("unsupported_isa"), std::string::npos) << text;

  if (mxmoe::isa_feature(full.isa, "avx512_vnni").value_or(false)) {
    const Linear q = bound(layer.weights(ElementType::bf16, false), full,
                   {DenseMode::compact_int8, nullptr});
    EXPECT_STREQ(q.kernel_name(), "avx512_vnni_int8");
  }
  const Linear q2 = bound(layer.weights(ElementType::bf16, false), mxmoe::probe_hardware("avx2"),
                  {DenseMode::compact_int8, nullptr});
  EXPECT_STREQ(q2.kernel_name(), "avx2_int8");
}

// The dense verdicts are the oracle's mxmoe::Verdict with every reason: capped at "none",
// every ISA kernel of either mode is rejected with each feature it lacks (unsupported_isa
// naming the cap; not_compiled for another architecture's), and the portable one is chosen
// with its estimate.
TEST(DenseLinear, CappedAtNoneEveryIsaKernelSaysWhyAndThePortableOneIsChosen) {
  const Layer layer = make_layer(16, 64, 3);
  const Hardware none = mxmoe::probe_hardware("none");
  for (const DenseMode mode :
       {DenseMode::as_published, DenseMode::compact_int8, DenseMode::compact_int4}) {
    const Linear lin = bound(layer.weights(ElementType::bf16, false), none, {mode, nullptr});
    const mxmoe::dense::LinearSelection& s = lin.selection();
    EXPECT_EQ(s.op.mode, mode);
    ASSERT_EQ(s.candidates.size(), 4u);
    const std::string portable = mode == DenseMode::compact_int8   ? "portable_int8"
                                 : mode == DenseMode::compact_int4 ? "portable_int4"
                                                                   : "portable_fp32";
    EXPECT_EQ(s.chosen, portable);
    EXPECT_STREQ(lin.kernel_name(), portable.c_str());
    for (const mxmoe::Verdict& v : s.candidates) {
      EXPECT_EQ(v.numerics_class, mode == DenseMode::compact_int8   ? "dense_int8_rows16"
                                  : mode == DenseMode::compact_int4 ? "dense_int4_rows16"
                                                                    : "dense_fp32_lanes16");
      if (v.name == portable) {
        EXPECT_TRUE(v.supported);
        EXPECT_TRUE(v.reasons.empty());
        EXPECT_GT(v.estimated_us, 0.0);
        continue;
      }
      EXPECT_FALSE(v.supported) << v.name;
      EXPECT_EQ(v.estimated_us, 0.0) << v.name;
      int isa = 0;
      for (const mxmoe::Rejection& r : v.reasons) {
        if (r.code == mxmoe::ReasonCode::not_compiled) continue;  // another architecture's
        ASSERT_EQ(r.code, mxmoe::ReasonCode::unsupported_isa) << v.name << ": " << r.detail;
        EXPECT_NE(r.actual.find("capped at 'none'"), std::string::npos) << r.actual;
        EXPECT_EQ(r.remedy, "raise or unset MXMOE_MAX_ISA");
        ++isa;
      }
      EXPECT_GE(isa, 1) << v.name;  // one for each feature it needs
      if (v.name == "avx512_fp32") {
        EXPECT_EQ(isa, 7);  // avx2, fma, f16c, avx512f, bw, vl, dq: every one
      }
    }
    EXPECT_EQ(s.why, "lowest estimated cost: " +
                         fmt::format("{:.1f}", s.candidates.back().estimated_us) +
                         " us per call (the only supported candidate)");
  }
}

// The oracle's ranking keeps the kernels' order: on every Hardware variant (and capped at
// each level) the chosen kernel is the first supported one of candidates(mode), as when the
// Linear bound the first accepted kernel itself.
TEST(DenseLinear, TheOracleChoosesTheFirstSupportedKernelOfTheList) {
  std::vector<Hardware> variants = hardware_variants();
  for (const char* cap : {"avx2", "avx_vnni", "avx512", "amx", "neon", "dotprod", "none"})
    variants.push_back(mxmoe::probe_hardware(cap));
  const Layer layer = make_layer(40, 96, 4);
  for (const DenseMode mode : kModes)
    for (const ElementType e : {ElementType::bf16, ElementType::f32})
      for (const Hardware& hw : variants) {
        const LinearWeights w = layer.weights(e, false);
        const auto judged = mxmoe::judge_each(mxmoe::dense::dense_op(w, mode, hw),
                                              mxmoe::dense::candidates(mode));
        std::string first;
        for (const mxmoe::Candidate<mxmoe::dense::DenseOp>* c : mxmoe::dense::candidates(mode))
          if (c->check(judged.op).empty()) {
            first = std::string(c->name());
            break;
          }
        EXPECT_EQ(judged.chosen, first) << hw.isa_cap << " " << to_string(mode);
      }
}

// A Linear binds only what the oracle judged for its weights: a judgement of another layer,
// or one whose chosen kernel refuses the op, is refused naming the tensor.
TEST(DenseLinear, AJudgementOfAnotherLayerIsRefused) {
  const Layer layer = make_layer(16, 64, 5);
  const LinearWeights w = layer.weights(ElementType::bf16, false);
  const Hardware hw = mxmoe::probe_hardware();
  const auto judged = mxmoe::judge_each(mxmoe::dense::dense_op(w, DenseMode::as_published, hw),
                                        mxmoe::dense::candidates(DenseMode::as_published));
  LinearWeights other = w;
  other.in = 32;
  EXPECT_THROW((void)Linear(other, judged), std::invalid_argument);
  auto forged = judged;
  forged.chosen = "neon_fp32";  // rejected here: never bound
  if (kX86BackendsCompiled) {
    try {
      const Linear lin(w, forged);
      ADD_FAILURE() << "bound a kernel that cannot run";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("'blk.0.attn_q.weight'"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("not_compiled"), std::string::npos) << e.what();
    }
  }
  forged.chosen = "avx2_int8";  // of the other mode
  EXPECT_THROW((void)Linear(w, forged), std::invalid_argument);
}

void expect_refused(const LinearWeights& w, const std::string& what,
                    DenseMode mode = DenseMode::as_published) {
  try {
    const Linear lin = bound(w, mxmoe::probe_hardware(), {mode, nullptr});
    ADD_FAILURE() << "accepted: " << what;
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'" + w.name + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
  }
}

TEST(DenseLinear, HostileConstructionIsRefusedNamingTheTensor) {
  const Layer layer = make_layer(4, 32, 2);
  LinearWeights w = layer.weights(ElementType::bf16, false);
  w.name = "output.weight";
  LinearWeights bad = w;
  bad.data = nullptr;
  expect_refused(bad, "no data");
  bad = w;
  bad.element = ElementType::mxfp4;
  expect_refused(bad, "is not f32 or bf16");
  bad = w;
  bad.bias = layer.bias.data();
  bad.bias_element = ElementType::mxfp4;
  expect_refused(bad, "bias element type");
  for (const auto& [out, in] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {0, 32}, {4, 0}, {-1, 32}, {4, std::int64_t{1} << 40}, {std::int64_t{1} << 25, 32}}) {
    bad = w;
    bad.out = out;
    bad.in = in;
    expect_refused(bad, "out of range");
  }
  bad = w;
  bad.in = mxmoe::dense::kCompactMaxIn + 32;  // never read: refused before any access
  expect_refused(bad, "shape_alignment", DenseMode::compact_int8);
  expect_refused(bad, "shape_alignment", DenseMode::compact_int4);
  bad = w;
  bad.in = mxmoe::dense::kBf16MaxIn + 32;
  expect_refused(bad, "shape_alignment", DenseMode::as_published_bf16);
  bad = w;
  bad.element = ElementType::f32;
  bad.data = layer.f32.data();
  expect_refused(bad, "bf16-activation kernels read bf16 weights", DenseMode::as_published_bf16);
}

}  // namespace
