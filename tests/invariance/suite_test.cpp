// The conformance suite: for every claimed (backend, batch-invariant activation format) that
// runs on this machine, a token's output bits are the same alone and at every position of
// batches of 1..257 random neighbours, with 1 and 2 threads, across repeated runs and a
// freshly built layer; with random routing, one expert taking every token, experts with no
// tokens, exact routing ties, and the layer's own router.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "invariance_fixture.hpp"
#include "routing/routing.hpp"
#include "test_runtime.hpp"
#include "verify/invariance.hpp"

namespace invariance_test {
namespace {

using mxmoe::ActivationFormat;
using mxmoe::InvarianceInputs;
using mxmoe::InvarianceOptions;
using mxmoe::InvarianceRouting;
using mxmoe::LayerSpec;
using mxmoe::LayerStorage;
using mxmoe::MoeLayer;

class Suite : public ::testing::TestWithParam<Claim> {
 protected:
  void SetUp() override {
    if (!runnable_here(spec_, GetParam().backend, GetParam().format))
      GTEST_SKIP() << claim_name(GetParam().backend, GetParam().format)
                   << " does not run on this machine";
  }

  // The full sweep of the issue: sizes 1..257, 1 and 2 threads, two runs (the second on a
  // freshly built layer).
  void expect_invariant(const InvarianceInputs& inputs, int batches_per_size = 1) {
    InvarianceOptions options;
    options.batches_per_size = batches_per_size;
    const mxmoe::Selection sel = forced_selection(spec_, GetParam().backend, GetParam().format);
    const auto report = mxmoe::check_batch_invariance(
        [&](mxmoe::Runtime& rt) { return mxmoe::MoeLayer(storage_.weights(), sel, rt); }, inputs,
        options);
    ASSERT_TRUE(report.identical()) << report.first_mismatch->describe();
    // Every row of every batch was compared: sum(sizes) x draws x threads x runs.
    EXPECT_EQ(report.rows_compared, 508 * batches_per_size * 2 * 2);
  }

  const LayerSpec spec_ = small_spec();
  const LayerStorage storage_ = LayerStorage::random(spec_, 11);
  static constexpr std::int64_t kPool = 257;  // the largest batch: all pool tokens
};

TEST_P(Suite, RandomRouting) {
  expect_invariant(mxmoe::random_invariance_inputs(spec_, InvarianceRouting::routed, kPool, 21),
                   /*batches_per_size=*/2);
}

// Every token sends its first slot to expert 5 (one expert gets the whole batch, so the
// int8 backends take their many-token path there) and its second to a random other one.
TEST_P(Suite, OneExpertTakesEveryToken) {
  auto in = mxmoe::random_invariance_inputs(spec_, InvarianceRouting::routed, kPool, 22);
  std::mt19937 rng(3);
  for (std::int64_t t = 0; t < kPool; ++t) {
    const auto slot = static_cast<std::size_t>(t * spec_.top_k);
    in.ids[slot] = 5;
    in.ids[slot + 1] = static_cast<std::int32_t>((5 + 1 + rng() % 7) % 8);
  }
  expect_invariant(in);
}

// Only experts 0..2 are used: experts 3..7 receive zero tokens in every batch.
TEST_P(Suite, ExpertsWithZeroTokens) {
  auto in = mxmoe::random_invariance_inputs(spec_, InvarianceRouting::routed, kPool, 23);
  std::mt19937 rng(4);
  for (std::int64_t t = 0; t < kPool; ++t) {
    const auto slot = static_cast<std::size_t>(t * spec_.top_k);
    const auto first = static_cast<std::int32_t>(rng() % 3);
    in.ids[slot] = first;
    in.ids[slot + 1] = (first + 1 + static_cast<std::int32_t>(rng() % 2)) % 3;
  }
  expect_invariant(in);
}

// Router logits on a coarse grid {-1, 0, 1} (exact ties everywhere), every 5th token with
// all logits equal, and a crafted hot expert for every 3rd token: the top-k selection must
// break ties toward the lower index whatever the batch.
TEST_P(Suite, ExactRoutingTies) {
  auto in = mxmoe::random_invariance_inputs(spec_, InvarianceRouting::logits, kPool, 24);
  for (std::int64_t t = 0; t < kPool; ++t)
    for (int e = 0; e < spec_.num_experts; ++e) {
      float& v = in.logits[static_cast<std::size_t>(t * spec_.num_experts + e)];
      v = t % 5 == 0 ? 0.25f : std::round(v);
      if (t % 3 == 0 && e == 6) v = 4.0f;
    }
  expect_invariant(in);
}

// A token whose logits are all equal is routed to experts 0 and 1 with weight 1/2 each,
// alone and inside a batch: the same bits as giving that routing explicitly.
TEST_P(Suite, AllEqualLogitsPickTheLowestExperts) {
  const auto in = mxmoe::random_invariance_inputs(spec_, InvarianceRouting::logits, 31, 25);
  std::vector<float> logits = in.logits;
  std::fill_n(logits.begin() + 7 * spec_.num_experts, spec_.num_experts, -0.5f);
  MoeLayer layer = mxmoe::testing::test_layer(
      storage_.weights(), forced_selection(spec_, GetParam().backend, GetParam().format));
  std::vector<float> batched(in.x.size()), explicit_routing(static_cast<std::size_t>(spec_.hidden));
  layer.forward(
      {.tokens = 31, .x = in.x.data(), .y = batched.data(), .router_logits = logits.data()});
  const std::int32_t ids[2] = {0, 1};
  const float weights[2] = {0.5f, 0.5f};
  layer.forward({.tokens = 1,
                 .x = in.x.data() + 7 * spec_.hidden,
                 .y = explicit_routing.data(),
                 .expert_ids = ids,
                 .expert_weights = weights});
  EXPECT_EQ(std::memcmp(batched.data() + 7 * spec_.hidden, explicit_routing.data(),
                        explicit_routing.size() * sizeof(float)),
            0);
}

// forward(): the router GEMM, its bias and the routing are per-token deterministic too.
TEST_P(Suite, LayerRouter) {
  expect_invariant(mxmoe::random_invariance_inputs(spec_, InvarianceRouting::router, kPool, 26));
}

// DeepSeek-V4: a hash layer routed by token id (forward with ids), and a routed layer with
// the selection bias, both with the FP8 shared expert.
TEST_P(Suite, DeepSeekV4HashAndRoutedLayers) {
  for (const bool hash : {true, false}) {
    SCOPED_TRACE(hash ? "hash layer" : "routed layer");
    const LayerSpec spec = small_v4_spec(hash);
    if (!runnable_here(spec, GetParam().backend, GetParam().format)) GTEST_SKIP();
    const LayerStorage storage = LayerStorage::random(spec, 13);
    const auto inputs = mxmoe::random_invariance_inputs(spec, InvarianceRouting::router, kPool, 28);
    EXPECT_EQ(inputs.token_ids.empty(), !hash);
    const mxmoe::Selection sel = forced_selection(spec, GetParam().backend, GetParam().format);
    const auto report = mxmoe::check_batch_invariance(
        [&](mxmoe::Runtime& rt) { return mxmoe::MoeLayer(storage.weights(), sel, rt); }, inputs,
        InvarianceOptions{});
    ASSERT_TRUE(report.identical()) << report.first_mismatch->describe();
    EXPECT_EQ(report.rows_compared, 508 * 2 * 2 * 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Claims, Suite, ::testing::ValuesIn(covered_claims()),
                         [](const ::testing::TestParamInfo<Claim>& param) {
                           return claim_name(param.param.backend, param.param.format);
                         });

// gpt-oss-20b's hidden/intermediate (2880 = 22.5 x 128: every kernel's tail path) with 4
// experts, a few batch sizes, for the fast backends only (the reference backend is the
// slow float64-faithful path and is covered at the small shape).
TEST(LargeShape, GptOssWidthsAreBatchInvariant) {
  const LayerSpec spec = small_spec(/*experts=*/4, 2880, 2880);
  const LayerStorage storage = LayerStorage::random(spec, 12);
  const auto inputs = mxmoe::random_invariance_inputs(spec, InvarianceRouting::router, 17, 27);
  InvarianceOptions options;
  options.batch_sizes = {1, 3, 17};
  options.repeats = 1;
  int tested = 0;
  for (const Claim& c : covered_claims()) {
    if (c.backend == "reference" || !runnable_here(spec, c.backend, c.format)) continue;
    SCOPED_TRACE(claim_name(c.backend, c.format));
    const mxmoe::Selection sel = forced_selection(spec, c.backend, c.format);
    const auto report = mxmoe::check_batch_invariance(
        [&](mxmoe::Runtime& rt) { return mxmoe::MoeLayer(storage.weights(), sel, rt); }, inputs,
        options);
    EXPECT_TRUE(report.identical()) << report.first_mismatch->describe();
    ++tested;
  }
  if (tested == 0) GTEST_SKIP() << "no fast backend claims invariance on this machine";
}

}  // namespace
}  // namespace invariance_test
