// Routing: each method against a naive float64 version, ties, -inf, NaN, external routing.
#include "routing/routing.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "layer/naive_moe.hpp"

namespace {

using mxmoe::LayerSpec;
using mxmoe::RoutingMethod;
constexpr float kInf = std::numeric_limits<float>::infinity();

LayerSpec spec_for(RoutingMethod m, int experts, int k) {
  LayerSpec s;
  s.name = "routing test";
  s.num_experts = experts;
  s.top_k = k;
  s.hidden = 32;
  s.intermediate = 32;
  s.routing = m;
  if (m == RoutingMethod::sigmoid_group_topk || m == RoutingMethod::sqrtsoftplus_topk) {
    s.routing_params.selection_bias = true;
    s.routing_params.routed_scaling_factor = 2.5f;
  }
  if (m == RoutingMethod::sigmoid_group_topk) {
    s.routing_params.n_group = 4;
    s.routing_params.topk_group = 2;
  }
  return s;
}

struct Routed {
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
};

Routed route(const LayerSpec& s, const std::vector<float>& logits, const float* bias = nullptr) {
  const auto tokens = static_cast<std::int64_t>(logits.size()) / s.num_experts;
  Routed r{std::vector<std::int32_t>(static_cast<std::size_t>(tokens * s.top_k)), {}};
  r.weights.resize(r.ids.size());
  std::vector<float> scratch(mxmoe::routing_scratch_floats(s));
  mxmoe::route_logits(s, logits.data(), bias, tokens, r.ids.data(), r.weights.data(), scratch);
  return r;
}

class RoutingMethods : public ::testing::TestWithParam<RoutingMethod> {};

// Random logits (continuous, so no ties): ids identical to the naive routing, weights
// within float rounding of it (float32 scores vs double: a few ulp, 1e-5 relative is ample).
TEST_P(RoutingMethods, MatchesNaiveFloat64) {
  for (bool renormalize : {true, false}) {
    LayerSpec s = spec_for(GetParam(), 16, 4);
    s.routing_params.renormalize = renormalize;
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    const int tokens = 64;
    std::vector<float> logits(static_cast<std::size_t>(tokens * s.num_experts));
    for (float& v : logits) v = normal(rng);
    std::vector<float> bias(static_cast<std::size_t>(s.num_experts));
    for (float& v : bias) v = 0.1f * normal(rng);
    const Routed got = route(s, logits, bias.data());
    for (int t = 0; t < tokens; ++t) {
      std::vector<double> lt(logits.begin() + t * s.num_experts,
                             logits.begin() + (t + 1) * s.num_experts);
      std::vector<double> bd(bias.begin(), bias.end());
      std::vector<std::int32_t> ids(static_cast<std::size_t>(s.top_k));
      std::vector<float> w(ids.size());
      naive::route_token(s, lt, bd, ids.data(), w.data());
      for (int j = 0; j < s.top_k; ++j) {
        const auto slot = static_cast<std::size_t>(t * s.top_k + j);
        ASSERT_EQ(got.ids[slot], ids[static_cast<std::size_t>(j)]) << "token " << t;
        EXPECT_NEAR(got.weights[slot], w[static_cast<std::size_t>(j)],
                    1e-5 * static_cast<double>(std::abs(w[static_cast<std::size_t>(j)])) + 1e-7);
      }
    }
  }
}

// Exact ties pick the lower expert index first, for every method.
TEST_P(RoutingMethods, TiesBreakTowardLowerIndex) {
  const LayerSpec s = spec_for(GetParam(), 8, 3);
  const std::vector<float> logits = {0.5f, 2.0f, 1.0f, 2.0f, 1.0f, 2.0f, 0.0f, 0.5f};
  const std::vector<float> bias(8, 0.0f);
  const Routed r = route(s, logits, bias.data());
  if (GetParam() == RoutingMethod::sigmoid_group_topk) {
    // Groups {0,1},{2,3},{4,5},{6,7}: group scores tie for groups 1 and 2 (sigmoid(2)+
    // sigmoid(1)); group 0 (0.5, 2) is lower. Kept: groups 1 and 2; experts 3 and 5 tie.
    EXPECT_EQ(r.ids, (std::vector<std::int32_t>{3, 5, 2}));
  } else {
    EXPECT_EQ(r.ids, (std::vector<std::int32_t>{1, 3, 5}));
  }
}

// -inf logits: still k distinct experts; the finite ones first.
TEST_P(RoutingMethods, MinusInfinityStillYieldsDistinctExperts) {
  LayerSpec s = spec_for(GetParam(), 8, 4);
  if (GetParam() == RoutingMethod::sigmoid_group_topk) s.routing_params.topk_group = 4;
  const std::vector<float> bias(8, 0.0f);
  std::vector<float> logits(8, -kInf);
  logits[6] = 1.0f;
  const Routed r = route(s, logits, bias.data());
  EXPECT_EQ(r.ids[0], 6);
  std::vector<std::int32_t> sorted = r.ids;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  for (float w : r.weights) EXPECT_TRUE(std::isfinite(w));
  // All -inf: still distinct, lowest indices, finite weights.
  const Routed all = route(s, std::vector<float>(8, -kInf), bias.data());
  EXPECT_EQ(all.ids, (std::vector<std::int32_t>{0, 1, 2, 3}));
  for (float w : all.weights) EXPECT_TRUE(std::isfinite(w));
}

TEST_P(RoutingMethods, NanLogitIsAnErrorNamingTheToken) {
  const LayerSpec s = spec_for(GetParam(), 8, 2);
  const std::vector<float> bias(8, 0.0f);
  std::vector<float> logits(3 * 8, 0.25f);
  logits[2 * 8 + 5] = std::numeric_limits<float>::quiet_NaN();
  try {
    route(s, logits, bias.data());
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("token 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("NaN"), std::string::npos) << e.what();
  }
  logits[2 * 8 + 5] = kInf;
  EXPECT_THROW(route(s, logits, bias.data()), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(All, RoutingMethods,
                         ::testing::Values(RoutingMethod::topk_softmax, RoutingMethod::softmax_topk,
                                           RoutingMethod::sigmoid_group_topk,
                                           RoutingMethod::sqrtsoftplus_topk),
                         [](const auto& param_info) {
                           return std::string(mxmoe::to_string(param_info.param));
                         });

// DeepSeek-V3 grouped top-k by hand: the best single expert sits in a group whose second
// best is poor, so the group is dropped (group score = sum of its top 2).
TEST(GroupedTopK, GroupScoreIsTheSumOfTheTopTwo) {
  LayerSpec s = spec_for(RoutingMethod::sigmoid_group_topk, 8, 2);
  s.routing_params.topk_group = 1;
  const std::vector<float> bias(8, 0.0f);
  // group 0: {5, -5} -> ~1.0067; group 1: {1, 1} -> ~1.462; groups 2, 3 low.
  const std::vector<float> logits = {5.0f, -5.0f, 1.0f, 1.0f, -3.0f, -3.0f, -4.0f, -4.0f};
  const Routed r = route(s, logits, bias.data());
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{2, 3}));
  // Weights: equal scores, normalised, times the scaling factor 2.5.
  EXPECT_FLOAT_EQ(r.weights[0], 1.25f);
  EXPECT_FLOAT_EQ(r.weights[1], 1.25f);
}

TEST(GroupedTopK, SelectionBiasSelectsButDoesNotWeight) {
  LayerSpec s = spec_for(RoutingMethod::sqrtsoftplus_topk, 4, 1);
  s.routing_params.renormalize = false;
  s.routing_params.routed_scaling_factor = 1.0f;
  const std::vector<float> logits = {1.0f, 0.0f, 0.0f, 0.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 5.0f, 0.0f};
  const Routed r = route(s, logits, bias.data());
  EXPECT_EQ(r.ids[0], 2);
  EXPECT_FLOAT_EQ(r.weights[0], std::sqrt(std::log1p(std::exp(0.0f))));
}

TEST(ExternalRouting, Validation) {
  const LayerSpec s = spec_for(RoutingMethod::topk_softmax, 4, 2);
  const float w[] = {0.5f, 0.5f};
  const std::int32_t ok[] = {3, 0}, high[] = {4, 0}, negative[] = {-1, 0}, dup[] = {2, 2};
  EXPECT_NO_THROW(mxmoe::validate_routing(s, ok, w, 1));
  EXPECT_THROW(mxmoe::validate_routing(s, high, w, 1), std::invalid_argument);
  EXPECT_THROW(mxmoe::validate_routing(s, negative, w, 1), std::invalid_argument);
  EXPECT_THROW(mxmoe::validate_routing(s, dup, w, 1), std::invalid_argument);
  const float inf_w[] = {kInf, 0.5f}, nan_w[] = {0.5f, std::nanf("")};
  EXPECT_THROW(mxmoe::validate_routing(s, ok, inf_w, 1), std::invalid_argument);
  EXPECT_THROW(mxmoe::validate_routing(s, ok, nan_w, 1), std::invalid_argument);
  // The error names the token and slot.
  const std::int32_t second_bad[] = {0, 1, 1, 7};
  const float w2[] = {0.5f, 0.5f, 0.5f, 0.5f};
  try {
    mxmoe::validate_routing(s, second_bad, w2, 2);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("token 1, slot 1"), std::string::npos) << e.what();
  }
}

}  // namespace
