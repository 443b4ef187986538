// The backend conformance suite: every registered backend whose check() passes on this
// machine, for every activation format it supports, against the reference backend with the
// same format (same quantized inputs; only the order and precision of accumulation may
// differ). A new backend in backends.inc is picked up here without editing this file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/described_backend.hpp"
#include "backends/registry.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/layer_from_tensors.hpp"
#include "routing/routing.hpp"
#include "test_runtime.hpp"
#include "verify/accuracy.hpp"
#include "verify/evaluate_f64.hpp"

namespace {

using mxmoe::ActivationFormat;
using mxmoe::LayerSpec;

// 1e-5 relative L2: a float32 backend's accumulation error over K <= 160 products is a
// few 1e-7 relative (random-walk sqrt(K) * 2^-24 per step, twice: GEMM1 and GEMM2), the
// reference's (double) is ~1e-16; a real bug (a wrong block, scale, lane or bias) gives
// errors of order 1e-2 or more.
constexpr double kTolerance = 1e-5;

// Shapes with tails: H and I multiples of 32 but not of 64.
LayerSpec shape(std::string_view preset, int experts, int top_k) {
  LayerSpec s = mxmoe::preset(preset);
  s.name += " (conformance)";
  s.num_experts = experts;
  s.top_k = top_k;
  s.hidden = 96;
  s.intermediate = 160;
  if (s.shared_experts > 0) s.shared_intermediate = 96;
  if (s.routing == mxmoe::RoutingMethod::sigmoid_group_topk) {
    s.routing_params.n_group = 2;
    s.routing_params.topk_group = 2;
  }
  return s;
}

// Unit-variance inputs with tails: one element in 64 is 30x larger (outlier channels).
std::vector<float> input(const LayerSpec& s, std::int64_t tokens, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens * s.hidden));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * (rng() % 64 == 0 ? 30.0f : 1.0f);
  return x;
}

enum class Pattern { spread, one_expert, few_experts };

// Explicit routing so the extreme cases are certain: every token on expert E-1 (plus the
// next ones when k > 1), or only the first k+1 experts used (the others get zero tokens).
void routing(const LayerSpec& s, std::int64_t tokens, Pattern p, unsigned seed,
             std::vector<std::int32_t>& ids, std::vector<float>& weights) {
  std::mt19937 rng(seed);
  const int e = s.num_experts, k = s.top_k;
  ids.assign(static_cast<std::size_t>(tokens * k), 0);
  weights.assign(ids.size(), 0.0f);
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::vector<std::int32_t> order(static_cast<std::size_t>(e));
    for (int i = 0; i < e; ++i) order[static_cast<std::size_t>(i)] = i;
    if (p == Pattern::spread) std::shuffle(order.begin(), order.end(), rng);
    if (p == Pattern::one_expert) std::reverse(order.begin(), order.end());
    if (p == Pattern::few_experts)
      std::shuffle(order.begin(), order.begin() + std::min(e, k + 1), rng);
    for (int j = 0; j < k; ++j) {
      ids[static_cast<std::size_t>(t * k + j)] = order[static_cast<std::size_t>(j)];
      weights[static_cast<std::size_t>(t * k + j)] =
          0.25f + static_cast<float>(rng() % 1000) / 1000.0f;
    }
  }
}

mxmoe::Selection selection(const mxmoe::Backend& b, const LayerSpec& s, const mxmoe::Hardware& hw,
                           ActivationFormat f, int threads) {
  mxmoe::Selection sel;
  sel.deployment.layer = s;
  sel.deployment.hardware = hw;
  sel.deployment.request.activation = f;
  sel.deployment.request.threads = threads;
  sel.chosen = std::string(b.name());
  sel.why = "conformance";
  return sel;
}

double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    num += d * d;
    den += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  return std::sqrt(num / den);
}

// What a backend is compared with: the reference backend with the same format, or, for a
// backend that rounds its inputs further than the format (avx2_int16: bf16 values as int16
// per 32-block), the float64 evaluator rounding exactly as it does, which the reference
// backend cannot. Either way only the accumulation differs.
std::vector<float> expected(const mxmoe::Backend& b, const std::vector<float>& reference_out,
                            const LayerSpec& s, const mxmoe::LayerWeights& w,
                            const std::vector<float>& x, std::int64_t tokens,
                            const std::vector<std::int32_t>& ids, const std::vector<float>& weights,
                            ActivationFormat f) {
  if (!mxmoe::rounds_to_int16_blocks(b)) return reference_out;
  const std::vector<double> exact =
      mxmoe::evaluate_f64(s, w, x.data(), tokens, ids.data(), weights.data(), f, nullptr, true);
  return {exact.begin(), exact.end()};
}

struct Scenario {
  const char* preset;
  int experts, top_k;
  std::int64_t tokens;
  Pattern pattern;
};

constexpr Scenario kScenarios[] = {
    {"gpt-oss-20b", 6, 2, 1, Pattern::spread},
    {"gpt-oss-20b", 6, 2, 37, Pattern::spread},
    {"gpt-oss-20b", 5, 5, 64, Pattern::spread},  // top-k = E
    {"gpt-oss-20b", 8, 2, 600, Pattern::spread},
    {"mixtral-8x7b", 8, 2, 150, Pattern::few_experts},  // experts with zero tokens
    {"qwen3-30b-a3b", 4, 1, 129, Pattern::one_expert},  // all tokens on one expert
    {"deepseek-v3", 6, 3, 33, Pattern::spread},         // shared expert
    {"deepseek-v4-flash", 4, 4, 17, Pattern::one_expert},
};

TEST(Conformance, EveryBackendMatchesTheReference) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  const mxmoe::Backend* reference = mxmoe::find_backend("reference");
  ASSERT_NE(reference, nullptr);
  int checked = 0;
  for (const Scenario& sc : kScenarios) {
    const LayerSpec s = shape(sc.preset, sc.experts, sc.top_k);
    const auto storage = mxmoe::LayerStorage::random(s, 101);
    const auto x = input(s, sc.tokens, 102);
    std::vector<std::int32_t> ids;
    std::vector<float> weights;
    routing(s, sc.tokens, sc.pattern, 103, ids, weights);
    for (ActivationFormat f : mxmoe::all_activation_formats()) {
      std::vector<float> want(x.size());
      mxmoe::testing::test_layer(storage.weights(), selection(*reference, s, hw, f, 2))
          .forward({.tokens = sc.tokens,
                    .x = x.data(),
                    .y = want.data(),
                    .expert_ids = ids.data(),
                    .expert_weights = weights.data()});
      for (const mxmoe::Backend* b : mxmoe::registered_backends()) {
        const auto sel = selection(*b, s, hw, f, 1);
        if (!b->check(sel.deployment).empty()) continue;  // not selectable here
        SCOPED_TRACE(std::string(b->name()) + " " + std::string(mxmoe::to_string(f)) + " " +
                     s.name + " tokens=" + std::to_string(sc.tokens));
        mxmoe::MoeLayer layer = mxmoe::testing::test_layer(storage.weights(), sel);
        std::vector<float> one(x.size()), two(x.size());
        layer.forward({.tokens = sc.tokens,
                       .x = x.data(),
                       .y = one.data(),
                       .expert_ids = ids.data(),
                       .expert_weights = weights.data()});
        layer.set_runtime(mxmoe::testing::test_runtime(2));
        layer.forward({.tokens = sc.tokens,
                       .x = x.data(),
                       .y = two.data(),
                       .expert_ids = ids.data(),
                       .expert_weights = weights.data()});
        EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0)
            << "1 and 2 threads differ";
        EXPECT_LT(relative_l2(
                      one, expected(*b, want, s, storage.weights(), x, sc.tokens, ids, weights, f)),
                  kTolerance);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0) << "the reference backend at least must be selectable";
}

// The layer's own router path too (not only explicit routing), for each backend.
TEST(Conformance, RouterPathMatchesTheReference) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  const mxmoe::Backend* reference = mxmoe::find_backend("reference");
  ASSERT_NE(reference, nullptr);
  const LayerSpec s = shape("gpt-oss-20b", 8, 4);
  const auto storage = mxmoe::LayerStorage::random(s, 201);
  const auto x = input(s, 45, 202);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(45 * s.top_k));
  std::vector<float> weights(ids.size());
  mxmoe::route_with_router(s, storage.weights(), x.data(), 45, ids.data(), weights.data());
  for (ActivationFormat f : mxmoe::all_activation_formats()) {
    std::vector<float> want(x.size());
    mxmoe::testing::test_layer(storage.weights(), selection(*reference, s, hw, f, 1))
        .forward({.tokens = 45, .x = x.data(), .y = want.data()});
    for (const mxmoe::Backend* b : mxmoe::registered_backends()) {
      const auto sel = selection(*b, s, hw, f, 2);
      if (!b->check(sel.deployment).empty()) continue;
      SCOPED_TRACE(std::string(b->name()) + " " + std::string(mxmoe::to_string(f)));
      std::vector<float> got(x.size());
      mxmoe::testing::test_layer(storage.weights(), sel)
          .forward({.tokens = 45, .x = x.data(), .y = got.data()});
      EXPECT_LT(relative_l2(got, expected(*b, want, s, storage.weights(), x, 45, ids, weights, f)),
                kTolerance);
    }
  }
}

// DeepSeek-V4: a hash layer (experts by token id) and a routed layer, both with the FP8
// shared expert, through each backend's own router path, against the float64 evaluator
// (src/verify/evaluate_f64.cpp) rounding the same way: within the format's budget against
// the same rounding (docs/ACCURACY.md).
TEST(Conformance, DeepSeekV4LayersMatchTheFloat64Evaluator) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  int checked = 0;
  for (const bool hash : {true, false}) {
    LayerSpec s = shape(hash ? "deepseek-v4-flash-hash" : "deepseek-v4-flash", 8, 3);
    if (hash) s.vocab = 500;
    const auto storage = mxmoe::LayerStorage::random(s, 301);
    const std::int64_t tokens = 23;
    const auto x = input(s, tokens, 302);
    std::vector<std::int32_t> token_ids;
    for (std::int64_t t = 0; t < tokens; ++t)
      token_ids.push_back(static_cast<std::int32_t>((t * 131 + 7) % 500));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * s.top_k));
    std::vector<float> weights(ids.size());
    mxmoe::route_with_router(s, storage.weights(), x.data(), tokens, ids.data(), weights.data(),
                             token_ids.data());
    for (ActivationFormat f : mxmoe::all_activation_formats()) {
      // The evaluator rounds as the backend does (int16 blocks for avx2_int16).
      std::vector<double> want[2];
      for (const bool int16 : {false, true})
        want[int16] = mxmoe::evaluate_f64(s, storage.weights(), x.data(), tokens, ids.data(),
                                          weights.data(), f, nullptr, int16);
      for (const mxmoe::Backend* b : mxmoe::registered_backends()) {
        const auto sel = selection(*b, s, hw, f, 2);
        if (!b->check(sel.deployment).empty()) continue;
        const std::vector<double>& ref = want[mxmoe::rounds_to_int16_blocks(*b)];
        SCOPED_TRACE(std::string(b->name()) + " " + std::string(mxmoe::to_string(f)) + " " +
                     s.name);
        std::vector<float> got(x.size());
        mxmoe::testing::test_layer(storage.weights(), sel)
            .forward(
                {.tokens = tokens, .x = x.data(), .y = got.data(), .token_ids = token_ids.data()});
        double num = 0, den = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          const double g = got[i];
          num += (g - ref[i]) * (g - ref[i]);
          den += ref[i] * ref[i];
        }
        EXPECT_LT(std::sqrt(num / den), mxmoe::accuracy_budget(f).against_same_format);
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 8);
}

// `mxmoe verify --preset deepseek-v4-flash-hash --tokens 2 --activation bf16 --backend
// avx2_fp32` failed the fixed bf16 budget 1e-4 at 1.7e-4: one element of a (2.69531274 in the
// evaluation, one float ulp above the bf16 tie 2.6953125) rounded up there and down in the
// backend, and alone made the whole error. One token at a time (no averaging over tokens),
// ten draws: every bf16 backend within same_format_budget, which admits one such flip. Of 60
// draws (0..59) avx2_fp32's error exceeded the fixed 1e-4 in draw 58 alone, 2.5e-4 (budget
// 6.6e-4): the draws kept here include it.
TEST(Conformance, OneBf16RoundingFlipIsWithinTheSameFormatBudget) {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  LayerSpec s = shape("deepseek-v4-flash-hash", 8, 3);
  // DeepSeek-V4's K = 4096 and I = 2048 halved: long sums (float32 differs from float64 by
  // more, so ties flip oftener) and many elements of a.
  s.hidden = 2048;
  s.intermediate = 1024;
  s.shared_intermediate = 1024;
  s.vocab = 500;
  const auto storage = mxmoe::LayerStorage::random(s, 303);
  const ActivationFormat f = ActivationFormat::bf16;
  int checked = 0, above_fixed = 0;
  for (unsigned draw = 50; draw < 60; ++draw) {
    const auto x = input(s, 1, 400 + draw);
    const std::int32_t token_id = static_cast<std::int32_t>(draw * 7 % 500);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(s.top_k));
    std::vector<float> weights(ids.size());
    mxmoe::route_with_router(s, storage.weights(), x.data(), 1, ids.data(), weights.data(), &token_id);
    double largest_flip = 0;
    const std::vector<double> ref = mxmoe::evaluate_f64(s, storage.weights(), x.data(), 1, ids.data(),
                                                        weights.data(), f, nullptr, false, &largest_flip);
    double norm2 = 0;
    for (const double v : ref) norm2 += v * v;
    const double budget = mxmoe::same_format_budget(f, largest_flip, std::sqrt(norm2));
    for (const mxmoe::Backend* b : mxmoe::registered_backends()) {
      const auto sel = selection(*b, s, hw, f, 1);
      if (!b->check(sel.deployment).empty() || mxmoe::rounds_to_int16_blocks(*b)) continue;
      SCOPED_TRACE(std::string(b->name()) + " draw " + std::to_string(draw));
      std::vector<float> got(x.size());
      mxmoe::testing::test_layer(storage.weights(), sel)
          .forward({.tokens = 1, .x = x.data(), .y = got.data(), .token_ids = &token_id});
      double num = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        num += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
      const double error = std::sqrt(num / norm2);
      EXPECT_LE(error, budget);
      if (error > mxmoe::accuracy_budget(f).against_same_format) {
        ++above_fixed;
        std::printf("draw %u, %s: %.3e (budget %.3e)\n", draw, std::string(b->name()).c_str(), error, budget);
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 10);
  std::printf("bf16 same-rounding errors above the fixed 1e-4: %d of %d\n", above_fixed, checked);
}

// The numerics classes hold across architectures: every backend of a class gives the same bits
// on x86-64 and on aarch64. The layer is built from integers only (a xorshift stream for the
// codes, scales, biases, inputs and routing weights, each float a small integer over a power of
// two), so its bytes are the same on every machine, whatever the C++ library's distributions
// and libm do; the digest of the output bits is the one recorded here. The x86 build checks the
// x86 backends against it natively, the aarch64 build the Arm backends under qemu-user
// (scripts/cross-aarch64.sh, at several emulated CPUs): a kernel that rounded, ordered or
// clamped one value differently would change the digest.
struct Xorshift {
  std::uint32_t state;
  std::uint32_t operator()() {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return state;
  }
};

std::uint64_t fnv1a_bits(const std::vector<float>& v) {
  std::uint64_t h = 1469598103934665603ull;
  for (float f : v) {
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    for (int i = 0; i < 4; ++i) {
      h ^= (bits >> (8 * i)) & 0xFFu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

// A numerics class's recorded output for one activation format: every registered backend
// that names the class (Backend::numerics_class) must give it, on every architecture.
struct ClassCase {
  const char* numerics_class;
  ActivationFormat format;
  std::uint64_t digest;
};

TEST(NumericsClass, EveryBackendOfAClassGivesTheRecordedBitsOnEveryArchitecture) {
  constexpr int E = 4, H = 96, I = 160;
  constexpr std::int64_t kTokens = 37;  // tiles of 8 and 4 and a tail on every path
  Xorshift rng{0x9E3779B9u};
  std::vector<std::uint8_t> w13(E * 2 * I * H / 2), w13s(E * 2 * I * H / 32), w2(E * H * I / 2),
      w2s(E * H * I / 32);
  for (auto& b : w13) b = static_cast<std::uint8_t>(rng());
  for (auto& b : w2) b = static_cast<std::uint8_t>(rng());
  // 2^-9 .. 2^2: products of every size, some far below the others in a block's sum.
  for (auto& b : w13s) b = static_cast<std::uint8_t>(118 + rng() % 12);
  for (auto& b : w2s) b = static_cast<std::uint8_t>(118 + rng() % 12);
  const auto small = [&](int range, float unit) {
    return static_cast<float>(static_cast<int>(rng() % static_cast<std::uint32_t>(2 * range + 1)) -
                              range) *
           unit;
  };
  std::vector<float> b13(E * 2 * I), b2(E * H), x(kTokens * H), route_w(kTokens * 2);
  for (float& v : b13) v = small(64, 1.0f / 64);
  for (float& v : b2) v = small(64, 1.0f / 64);
  for (float& v : x) v = small(1000, 1.0f / 256) * (rng() % 64 == 0 ? 32.0f : 1.0f);
  std::vector<std::int32_t> ids(kTokens * 2);
  for (std::size_t t = 0; t < static_cast<std::size_t>(kTokens); ++t) {
    const std::uint32_t first = rng() % E;
    ids[2 * t] = static_cast<std::int32_t>(first);
    ids[2 * t + 1] = static_cast<std::int32_t>((first + 1 + rng() % (E - 1)) % E);
    route_w[2 * t] = static_cast<float>(1 + rng() % 255) / 256.0f;
    route_w[2 * t + 1] = 1.0f - route_w[2 * t];
  }
  mxmoe::LayerTensors t;
  t.w13_blocks = {w13.data(), mxmoe::TensorDtype::u8, {E, 2 * I, H / 2}};
  t.w13_scales = {w13s.data(), mxmoe::TensorDtype::u8, {E, 2 * I, H / 32}};
  t.w2_blocks = {w2.data(), mxmoe::TensorDtype::u8, {E, H, I / 2}};
  t.w2_scales = {w2s.data(), mxmoe::TensorDtype::u8, {E, H, I / 32}};
  t.w13_bias = {b13.data(), mxmoe::TensorDtype::f32, {E, 2 * I}};
  t.w2_bias = {b2.data(), mxmoe::TensorDtype::f32, {E, H}};
  LayerSpec math = mxmoe::family_math(mxmoe::Family::gpt_oss);
  math.top_k = 2;
  const mxmoe::TensorLayer layer = mxmoe::layer_from_tensors(math, t);

  const std::vector<ClassCase> classes = {
      {"int8_block32", ActivationFormat::int8, 0x41ca44f725c753e1ull},
      {"int16_block32", ActivationFormat::bf16, 0x67da957abb23e2c1ull},
      // The float path (strips of decoded floats, FMA, the scale once per block and token).
      {"fp32_strips", ActivationFormat::f32, 0xbb28227f27ec7ef7ull},
      {"fp32_strips", ActivationFormat::bf16, 0x4ea86bda11b9dabdull},
  };
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  int checked = 0;
  for (const ClassCase& c : classes) {
    std::vector<std::string_view> members;
    for (const mxmoe::Backend* b : mxmoe::registered_backends())
      if (b->numerics_class() == c.numerics_class) members.push_back(b->name());
    // Each class has a backend on both architectures (x86-64, aarch64).
    EXPECT_GE(members.size(), 2u) << c.numerics_class;
    for (std::string_view name : members) {
      const mxmoe::Backend* b = mxmoe::find_backend(name);
      ASSERT_NE(b, nullptr) << name;
      for (const int threads : {1, 2}) {
        const auto sel = selection(*b, layer.spec, hw, c.format, threads);
        if (!b->check(sel.deployment).empty()) break;  // not on this machine
        std::vector<float> out(x.size());
        for (const std::int64_t tokens : {kTokens, std::int64_t{1}}) {
          std::vector<float> part(static_cast<std::size_t>(tokens * H));
          mxmoe::testing::test_layer(layer.weights, sel)
              .forward({.tokens = tokens,
                        .x = x.data() + (kTokens - tokens) * H,
                        .y = part.data(),
                        .expert_ids = ids.data() + (kTokens - tokens) * 2,
                        .expert_weights = route_w.data() + (kTokens - tokens) * 2});
          if (tokens == kTokens) out = part;
          else  // the last token alone: its bits as inside the batch
            EXPECT_EQ(std::memcmp(part.data(), out.data() + (kTokens - 1) * H, H * sizeof(float)),
                      0)
                << name << ": the last token alone differs from it in the batch";
        }
        EXPECT_EQ(fnv1a_bits(out), c.digest)
            << c.numerics_class << " class (" << mxmoe::to_string(c.format) << "), " << name << ", "
            << threads << " threads: digest 0x" << std::hex
            << fnv1a_bits(out);
        ++checked;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no backend of an integer class runs on this machine";
}

}  // namespace
