// avx2 and avx512_bf16 through the ExpertKernel contract, against the reference backend with
// the same activation format: shapes with tails (H, I multiples of 32 but not 64), 1..300
// tokens, top-k up to E, experts with zero tokens, all tokens on one expert, tiny scales;
// thread count and batch composition must not change a single bit.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/kernel.hpp"
#include "backends/registry.hpp"
#include "backends_float/test_layer.hpp"
#include "mxmoe/oracle.hpp"

namespace mxmoe {
namespace {

struct BackendFormat {
  const char* backend;
  ActivationFormat format;
};

bool runnable(const BackendFormat& bf) {
  if (std::string(bf.backend) == "avx2")
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
}

// Tolerance against the reference (float64 accumulation, same rounded inputs): only the
// summation order differs, ~sqrt(K) 2^-24 relative (measured <= 2e-7 here). With bf16, a
// GEMM1 difference can also move an intermediate value across a bf16 rounding boundary (one
// ulp, 2^-8, on that element): rare at these K, and ~2^-8/sqrt(I) on the output when it
// happens. 1e-5 is the project's contract for both formats; a decode or indexing bug gives
// O(1) errors.
constexpr double kTolerance = 1e-5;

struct Shape {
  int hidden, inter, experts, top_k;
  ActivationFn fn;
  GateUpLayout layout;
  bool bias;
};

const Shape kShapes[] = {
    {96, 160, 8, 2, ActivationFn::swiglu_oai, GateUpLayout::interleaved, true},
    {160, 96, 6, 3, ActivationFn::silu_glu, GateUpLayout::halves, false},
    {64, 32, 4, 4, ActivationFn::silu_glu_clamp, GateUpLayout::interleaved, true},  // k = E
};

const BackendFormat kCandidates[] = {
    {"avx2", ActivationFormat::f32},
    {"avx2", ActivationFormat::bf16},
    {"avx512_bf16", ActivationFormat::bf16},
};

std::unique_ptr<ExpertKernel> make(const char* name, const Deployment& d, const LayerWeights& w) {
  const Backend* b = find_backend(name);
  EXPECT_NE(b, nullptr) << name;
  EXPECT_TRUE(b->check(d).empty()) << name << " rejects the test deployment";
  return b->create(d, w);
}

class FloatBackends : public ::testing::TestWithParam<BackendFormat> {
 protected:
  void SetUp() override {
    if (!runnable(GetParam())) GTEST_SKIP() << "CPU lacks the ISA of " << GetParam().backend;
  }
};

TEST_P(FloatBackends, MatchesReferenceOnRandomLayers) {
  const BackendFormat bf = GetParam();
  std::uint64_t seed = 7;
  for (const Shape& s : kShapes) {
    const LayerSpec spec =
        test::small_spec(s.hidden, s.inter, s.experts, s.top_k, s.fn, s.layout, s.bias);
    const test::RandomLayer layer(spec, seed++);
    const Deployment d = test::deployment(spec, bf.format, test::sapphire_rapids());
    const auto kernel = make(bf.backend, d, layer.weights());
    const auto reference = make("reference", d, layer.weights());
    // Resident weights within 1.1x the MXFP4 bytes (+ the float32 biases, kept as they are).
    const double bias_bytes = s.bias ? 4.0 * s.experts * (2 * s.inter + s.hidden) : 0.0;
    ASSERT_LE(static_cast<double>(kernel->packed_bytes()),
              1.1 * static_cast<double>(layer.mxfp4_bytes()) + bias_bytes);
    std::mt19937_64 rng(seed++);
    for (std::int64_t tokens : {1, 2, 7, 13, 300}) {
      const auto x = test::random_tokens(tokens, spec.hidden, rng);
      // Experts 0 and 1 never get tokens when k < E (zero-token experts).
      std::vector<int> allowed;
      for (int e = s.top_k < s.experts ? 2 : 0; e < s.experts; ++e) allowed.push_back(e);
      if (static_cast<int>(allowed.size()) < s.top_k) allowed.clear();
      const auto routing = test::group_by_expert(
          test::random_ids(tokens, s.top_k, s.experts, rng, allowed), s.experts);
      const auto got = test::run_kernel(*kernel, spec, x, routing, 2);
      const auto want = test::run_kernel(*reference, spec, x, routing, 1);
      EXPECT_LE(test::relative_l2(got, want), kTolerance)
          << bf.backend << " H=" << s.hidden << " I=" << s.inter << " tokens=" << tokens;
    }
  }
}

TEST_P(FloatBackends, AllTokensOnOneExpertAndTinyScales) {
  const BackendFormat bf = GetParam();
  const LayerSpec spec =
      test::small_spec(96, 160, 4, 1, ActivationFn::swiglu_oai, GateUpLayout::interleaved, true);
  // W1 with scale codes 0..10 (subnormal-range weights, h ~ 1e-35) and normal W2; then normal
  // W1 and W2 scales in 0..70 (both sides of bf16's fold threshold).
  const test::ScaleRange ranges[][2] = {{{0, 10}, {120, 126}}, {{120, 126}, {0, 70}}};
  std::uint64_t seed = 40;
  for (const auto& r : ranges) {
    const test::RandomLayer layer(spec, seed++, r[0], r[1]);
    const Deployment d = test::deployment(spec, bf.format, test::sapphire_rapids());
    const auto kernel = make(bf.backend, d, layer.weights());
    const auto reference = make("reference", d, layer.weights());
    std::mt19937_64 rng(seed++);
    const std::int64_t tokens = 37;
    const auto x = test::random_tokens(tokens, spec.hidden, rng);
    const auto routing = test::group_by_expert(std::vector<std::int32_t>(tokens, 2), 4);
    const auto got = test::run_kernel(*kernel, spec, x, routing, 2);
    const auto want = test::run_kernel(*reference, spec, x, routing, 1);
    EXPECT_LE(test::relative_l2(got, want), kTolerance)
        << "W1 codes " << int{r[0].lo} << ".." << int{r[0].hi};
  }
}

bool same_bits(const float* a, const float* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// The layer of the bit-identity tests: 8 experts, top-2, H and I with tails.
LayerSpec invariance_spec() {
  return test::small_spec(96, 160, 8, 2, ActivationFn::swiglu_oai, GateUpLayout::interleaved, true);
}

// Token t of x (2 expert ids per token in ids, 8 experts) run alone, on 1 thread: its two
// slot outputs.
std::vector<float> run_alone(const ExpertKernel& kernel, const LayerSpec& spec,
                             const std::vector<float>& x, const std::vector<std::int32_t>& ids,
                             std::size_t t) {
  const auto h = static_cast<std::size_t>(spec.hidden);
  const std::vector<float> xt(x.begin() + static_cast<std::ptrdiff_t>(t * h),
                              x.begin() + static_cast<std::ptrdiff_t>((t + 1) * h));
  const std::vector<std::int32_t> idt(ids.begin() + static_cast<std::ptrdiff_t>(2 * t),
                                      ids.begin() + static_cast<std::ptrdiff_t>(2 * t + 2));
  return test::run_kernel(kernel, spec, xt, test::group_by_expert(idt, 8), 1);
}

TEST_P(FloatBackends, ThreadCountDoesNotChangeBits) {
  const BackendFormat bf = GetParam();
  const LayerSpec spec = invariance_spec();
  const test::RandomLayer layer(spec, 11);
  const auto kernel =
      make(bf.backend, test::deployment(spec, bf.format, test::sapphire_rapids()), layer.weights());
  std::mt19937_64 rng(12);
  const auto x = test::random_tokens(45, spec.hidden, rng);
  const auto routing = test::group_by_expert(test::random_ids(45, 2, 8, rng), 8);
  const auto one = test::run_kernel(*kernel, spec, x, routing, 1);
  const auto two = test::run_kernel(*kernel, spec, x, routing, 2);
  const auto three = test::run_kernel(*kernel, spec, x, routing, 3);
  EXPECT_TRUE(same_bits(one.data(), two.data(), one.size()));
  EXPECT_TRUE(same_bits(one.data(), three.data(), one.size()));
}

TEST_P(FloatBackends, TokenAloneMatchesTokenInBatch) {
  const BackendFormat bf = GetParam();
  const LayerSpec spec = invariance_spec();
  const test::RandomLayer layer(spec, 21);
  const auto kernel =
      make(bf.backend, test::deployment(spec, bf.format, test::sapphire_rapids()), layer.weights());
  std::mt19937_64 rng(22);
  const std::int64_t tokens = 31;
  const auto x = test::random_tokens(tokens, spec.hidden, rng);
  // Few experts so that tiles of 2 and 6 tokens fill up, with every token position probed.
  const auto ids = test::random_ids(tokens, 2, 8, rng, {1, 4, 6});
  const auto batch = test::run_kernel(*kernel, spec, x, test::group_by_expert(ids, 8), 2);
  const auto h = static_cast<std::size_t>(spec.hidden);
  for (std::int64_t t = 0; t < tokens; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    const auto alone = run_alone(*kernel, spec, x, ids, tt);
    EXPECT_TRUE(same_bits(alone.data(), batch.data() + 2 * tt * h, 2 * h)) << "token " << t;
  }
}

// A token's bits do not depend on how many tokens share the call (1..300): small batches take
// the fused few-token path, large ones the decode-once path with tiles of several tokens.
TEST_P(FloatBackends, TokenBitsIndependentOfBatchSize) {
  const BackendFormat bf = GetParam();
  const LayerSpec spec = invariance_spec();
  const test::RandomLayer layer(spec, 31);
  const auto kernel =
      make(bf.backend, test::deployment(spec, bf.format, test::sapphire_rapids()), layer.weights());
  std::mt19937_64 rng(32);
  const std::int64_t tokens = 300;
  const auto x = test::random_tokens(tokens, spec.hidden, rng);
  const auto ids = test::random_ids(tokens, 2, 8, rng);
  const auto h = static_cast<std::size_t>(spec.hidden);
  const auto first = [&](const auto& v, std::size_t n) {
    return std::vector<typename std::decay_t<decltype(v)>::value_type>(
        v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
  };
  std::vector<std::vector<float>> alone;
  for (std::int64_t t = 0; t < tokens; ++t)
    alone.push_back(run_alone(*kernel, spec, x, ids, static_cast<std::size_t>(t)));
  for (const std::size_t m : {1u, 2u, 3u, 5u, 8u, 13u, 29u, 64u, 150u, 300u}) {
    const auto batch = test::run_kernel(*kernel, spec, first(x, m * h),
                                        test::group_by_expert(first(ids, 2 * m), 8), 2);
    for (std::size_t t = 0; t < m; ++t)
      EXPECT_TRUE(same_bits(alone[t].data(), batch.data() + 2 * t * h, 2 * h))
          << "token " << t << " in a batch of " << m;
  }
}

INSTANTIATE_TEST_SUITE_P(All, FloatBackends, ::testing::ValuesIn(kCandidates),
                         [](const auto& param_info) {
                           return std::string(param_info.param.backend) + "_" +
                                  std::string(to_string(param_info.param.format));
                         });

TEST(FloatBackendChecks, HonestAboutFormatsAndIsa) {
  const LayerSpec spec = test::small_spec(2880, 2880, 32, 4, ActivationFn::swiglu_oai,
                                          GateUpLayout::interleaved, true);
  Hardware hw = test::sapphire_rapids();
  const Backend* bf16 = find_backend("avx512_bf16");
  const Backend* avx2 = find_backend("avx2");
  ASSERT_NE(bf16, nullptr);
  ASSERT_NE(avx2, nullptr);
  EXPECT_TRUE(bf16->check(test::deployment(spec, ActivationFormat::bf16, hw)).empty());
  EXPECT_TRUE(avx2->check(test::deployment(spec, ActivationFormat::f32, hw)).empty());
  const auto f32 = bf16->check(test::deployment(spec, ActivationFormat::f32, hw));
  ASSERT_EQ(f32.size(), 1u);
  EXPECT_EQ(f32[0].code, ReasonCode::activation_format);
  EXPECT_FALSE(avx2->check(test::deployment(spec, ActivationFormat::int8, hw)).empty());

  hw.isa = cap_isa(hw.isa, "avx2");
  const auto capped = bf16->check(test::deployment(spec, ActivationFormat::bf16, hw));
  ASSERT_FALSE(capped.empty());
  EXPECT_EQ(capped[0].code, ReasonCode::unsupported_isa);
  EXPECT_TRUE(avx2->check(test::deployment(spec, ActivationFormat::bf16, hw)).empty());
  hw.isa = cap_isa(hw.isa, "none");
  EXPECT_FALSE(avx2->check(test::deployment(spec, ActivationFormat::bf16, hw)).empty());
}

}  // namespace
}  // namespace mxmoe
