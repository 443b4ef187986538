// DeepSeek-V4's routing: hash layers (experts by token id from tid2eid, weights from the
// router's scores) for each score function, and the softmax scoring of routed layers with a
// selection bias and a scaling factor; against the naive float64 routing of the layer tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "layer/naive_moe.hpp"
#include "routing/routing.hpp"

namespace {

using mxmoe::LayerSpec;
using mxmoe::RoutingMethod;
using mxmoe::ScoreFunction;

LayerSpec hash_spec(ScoreFunction f, bool renormalize) {
  LayerSpec s;
  s.name = "hash routing test";
  s.num_experts = 16;
  s.top_k = 4;
  s.hidden = 32;
  s.intermediate = 32;
  s.routing = RoutingMethod::hash;
  s.routing_params.score_function = f;
  s.routing_params.renormalize = renormalize;
  s.routing_params.routed_scaling_factor = 1.5f;
  s.vocab = 100;
  return s;
}

// A table of distinct random experts per token id, in random order (the slot order).
std::vector<std::int32_t> random_table(const LayerSpec& s, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> table;
  std::vector<std::int32_t> experts(static_cast<std::size_t>(s.num_experts));
  std::iota(experts.begin(), experts.end(), 0);
  for (int t = 0; t < s.vocab; ++t) {
    std::shuffle(experts.begin(), experts.end(), rng);
    table.insert(table.end(), experts.begin(), experts.begin() + s.top_k);
  }
  return table;
}

TEST(HashRouting, MatchesNaiveFloat64ForEveryScoreFunction) {
  for (const ScoreFunction f :
       {ScoreFunction::sqrtsoftplus, ScoreFunction::sigmoid, ScoreFunction::softmax}) {
    for (const bool renormalize : {true, false}) {
      SCOPED_TRACE(std::string(mxmoe::to_string(f)) + (renormalize ? " renormalized" : ""));
      const LayerSpec s = hash_spec(f, renormalize);
      const std::vector<std::int32_t> table = random_table(s, 7);
      const mxmoe::TokenExpertTable view{table.data(), false, s.vocab, s.top_k};
      const std::int64_t tokens = 40;
      std::mt19937 rng(3);
      std::normal_distribution<float> normal(0.0f, 2.0f);
      std::vector<float> logits(static_cast<std::size_t>(tokens * s.num_experts));
      for (float& v : logits) v = normal(rng);
      std::vector<std::int32_t> token_ids(static_cast<std::size_t>(tokens));
      for (auto& id : token_ids) id = static_cast<std::int32_t>(rng() % 100);
      token_ids[5] = token_ids[6];  // the same token twice: the same experts
      std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * s.top_k));
      std::vector<float> weights(ids.size()), scratch(mxmoe::routing_scratch_floats(s));
      mxmoe::route_hash(s, logits.data(), view, token_ids.data(), tokens, ids.data(),
                        weights.data(), scratch);
      for (std::int64_t t = 0; t < tokens; ++t) {
        std::vector<double> logit(logits.begin() + t * s.num_experts,
                                  logits.begin() + (t + 1) * s.num_experts);
        std::int32_t want_ids[4];
        float want_w[4];
        for (int j = 0; j < 4; ++j)
          want_ids[j] =
              table[static_cast<std::size_t>(token_ids[static_cast<std::size_t>(t)] * 4 + j)];
        naive::route_token(s, logit, {}, want_ids, want_w);
        for (int j = 0; j < 4; ++j) {
          const auto slot = static_cast<std::size_t>(t * 4 + j);
          EXPECT_EQ(ids[slot], want_ids[j]) << "token " << t << " slot " << j;
          // float32 scores against double: a few ulp; 1e-5 relative is ample.
          EXPECT_NEAR(double{weights[slot]}, double{want_w[j]}, 1e-5 * std::fabs(double{want_w[j]}))
              << t << " " << j;
        }
      }
      // The same token id picks the same experts; the weights come from each token's scores.
      for (std::size_t j = 0; j < 4; ++j) EXPECT_EQ(ids[20 + j], ids[24 + j]);
    }
  }
}

TEST(HashRouting, TokenIdsOutsideTheVocabularyNameTheToken) {
  const LayerSpec s = hash_spec(ScoreFunction::sqrtsoftplus, true);
  const std::vector<std::int32_t> table = random_table(s, 1);
  const mxmoe::TokenExpertTable view{table.data(), false, s.vocab, s.top_k};
  std::vector<float> logits(3 * 16, 0.5f), weights(12), scratch(mxmoe::routing_scratch_floats(s));
  std::vector<std::int32_t> ids(12);
  const auto message = [&](std::vector<std::int32_t> token_ids) -> std::string {
    try {
      mxmoe::route_hash(s, logits.data(), view, token_ids.empty() ? nullptr : token_ids.data(), 3,
                        ids.data(), weights.data(), scratch);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(message({0, 99, 100}), "token id 100 of token 2 is out of range [0, 100)");
  EXPECT_EQ(message({-1, 0, 0}), "token id -1 of token 0 is out of range [0, 100)");
  EXPECT_NE(message({}).find("needs the tokens' ids"), std::string::npos);
  EXPECT_EQ(message({0, 1, 99}), "accepted");
  // A hash layer cannot be routed from logits alone.
  EXPECT_THROW(
      mxmoe::route_logits(s, logits.data(), nullptr, 3, ids.data(), weights.data(), scratch),
      std::invalid_argument);
}

// DeepSeek-V4 with scoring_func softmax: selection by p + bias, weights p normalised and
// scaled; the naive routing adds the bias and the scale the same way.
TEST(SoftmaxScoring, SelectionBiasAndScalingMatchNaive) {
  LayerSpec s = hash_spec(ScoreFunction::softmax, true);
  s.routing = RoutingMethod::softmax_topk;
  s.vocab = 0;
  s.routing_params.selection_bias = true;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> bias(16), logits(25 * 16);
  for (float& b : bias) b = 0.05f * normal(rng);
  for (float& v : logits) v = normal(rng);
  std::vector<std::int32_t> ids(25 * 4);
  std::vector<float> weights(ids.size()), scratch(mxmoe::routing_scratch_floats(s));
  mxmoe::route_logits(s, logits.data(), bias.data(), 25, ids.data(), weights.data(), scratch);
  const std::vector<double> bias_d(bias.begin(), bias.end());
  for (int t = 0; t < 25; ++t) {
    std::vector<double> logit(logits.begin() + t * 16, logits.begin() + (t + 1) * 16);
    std::int32_t want_ids[4];
    float want_w[4];
    naive::route_token(s, logit, bias_d, want_ids, want_w);
    float sum = 0;
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(ids[static_cast<std::size_t>(t * 4 + j)], want_ids[j]);
      EXPECT_NEAR(weights[static_cast<std::size_t>(t * 4 + j)], want_w[j], 1e-5f);
      sum += weights[static_cast<std::size_t>(t * 4 + j)];
    }
    EXPECT_NEAR(sum, 1.5f, 1e-5f);  // normalised, times routed_scaling_factor
  }
}

}  // namespace
