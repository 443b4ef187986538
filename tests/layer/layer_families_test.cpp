// Every family's layer against the naive float64 layer of naive_moe.hpp.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "layer/layer_fixture.hpp"
#include "layer/naive_moe.hpp"
#include "test_runtime.hpp"

namespace {

using mxmoe::ActivationFormat;
using mxmoe::LayerSpec;

struct Case {
  std::string name;
  LayerSpec spec;
  std::int64_t tokens;
};

std::vector<Case> cases() {
  using layer_test::shrink;
  LayerSpec qwen_no_renorm = shrink("qwen3-30b-a3b", 8, 3, 128, 96);
  qwen_no_renorm.routing_params.renormalize = false;
  // DeepSeek-V4's hash layers (experts by token id) and its shared expert in each storage.
  LayerSpec v4_hash = shrink("deepseek-v4-flash-hash", 8, 3, 96, 64);
  v4_hash.vocab = 300;
  LayerSpec v4_hash_softmax = v4_hash;
  v4_hash_softmax.routing_params.score_function = mxmoe::ScoreFunction::softmax;
  v4_hash_softmax.shared_weight_format = mxmoe::ElementType::bf16;
  LayerSpec v4_shared_f32 = shrink("deepseek-v4-flash", 8, 3, 96, 64);
  v4_shared_f32.shared_weight_format = mxmoe::ElementType::f32;
  LayerSpec v4_shared_mxfp4 = shrink("deepseek-v4-flash", 8, 3, 96, 64);
  v4_shared_mxfp4.shared_weight_format = mxmoe::ElementType::mxfp4;
  LayerSpec v4_softmax = shrink("deepseek-v4-flash", 8, 3, 96, 64);
  v4_softmax.routing = mxmoe::RoutingMethod::softmax_topk;
  return {
      // gpt-oss at its real width: 2880 = 90 blocks (few experts and tokens to stay fast).
      {"gpt_oss_2880", shrink("gpt-oss-20b", 4, 2, 2880, 2880), 3},
      {"gpt_oss_e3_top1", shrink("gpt-oss-20b", 3, 1, 64, 96), 9},
      {"mixtral_topk_eq_e", shrink("mixtral-8x7b", 4, 4, 96, 64), 7},
      {"qwen3_renorm", shrink("qwen3-30b-a3b", 8, 3, 128, 96), 6},
      {"qwen3_no_renorm", qwen_no_renorm, 5},
      {"deepseek_v3_grouped", shrink("deepseek-v3", 16, 4, 64, 32), 8},
      {"deepseek_v4", shrink("deepseek-v4-flash", 8, 3, 96, 64), 8},
      {"deepseek_v4_hash", v4_hash, 9},
      {"deepseek_v4_hash_softmax_shared_bf16", v4_hash_softmax, 5},
      {"deepseek_v4_shared_f32", v4_shared_f32, 6},
      {"deepseek_v4_shared_mxfp4", v4_shared_mxfp4, 4},
      {"deepseek_v4_softmax_scoring", v4_softmax, 7},
  };
}

class LayerFamily : public ::testing::TestWithParam<Case> {};

// Token ids for a hash layer (random in [0, vocab)), none for the others.
std::vector<std::int32_t> token_ids(const Case& c) {
  std::vector<std::int32_t> ids;
  if (c.spec.routing != mxmoe::RoutingMethod::hash) return ids;
  std::mt19937 rng(17);
  for (std::int64_t t = 0; t < c.tokens; ++t)
    ids.push_back(static_cast<std::int32_t>(rng() % static_cast<unsigned>(c.spec.vocab)));
  return ids;
}

std::vector<float> run_layer(const Case& c, const mxmoe::LayerWeights& w, ActivationFormat f,
                             const std::vector<float>& x) {
  mxmoe::MoeLayer layer = mxmoe::testing::test_layer(w, layer_test::reference_selection(c.spec, f));
  std::vector<float> y(x.size());
  const std::vector<std::int32_t> ids = token_ids(c);
  layer.forward({.tokens = c.tokens,
                 .x = x.data(),
                 .y = y.data(),
                 .token_ids = ids.empty() ? nullptr : ids.data()});
  return y;
}

// f32 activations: the only differences to the naive layer are float rounding of the
// logits/routing weights, of h and a (stored as float) and of the float combine, each
// ~6e-8 relative: 1e-5 leaves two orders of magnitude of margin.
TEST_P(LayerFamily, F32MatchesNaiveFloat64) {
  const Case& c = GetParam();
  const auto storage = mxmoe::LayerStorage::random(c.spec, 11);
  const auto x = layer_test::random_input(c.spec, c.tokens, 5);
  const auto ids = token_ids(c);
  const auto routing = naive::route(c.spec, storage.weights(), x.data(), c.tokens, ids.data());
  const auto want = naive::layer(c.spec, storage.weights(), x, routing, std::nullopt);
  const auto got = run_layer(c, storage.weights(), ActivationFormat::f32, x);
  EXPECT_LT(naive::relative_l2(got, want), 1e-5);
}

// Quantized activations, two measures (derivations in docs/ACCURACY.md):
//  - against the naive layer rounding the same way: the tolerance only covers the rare
//    element whose float32 value sits within rounding noise of a quantization boundary and
//    flips to the neighbouring code (one quantum on one element of thousands);
//  - against the unquantized naive layer: the format's own error budget.
struct FormatBudget {
  ActivationFormat format;
  double same_rounding;
  double format_budget;
};
constexpr FormatBudget kBudgets[] = {
    {ActivationFormat::bf16, 1e-4, 1e-2},
    {ActivationFormat::int8, 1e-4, 2.5e-2},
    {ActivationFormat::mxfp8, 5e-4, 8e-2},
};

TEST_P(LayerFamily, QuantizedFormatsWithinBudget) {
  const Case& c = GetParam();
  const auto storage = mxmoe::LayerStorage::random(c.spec, 12);
  const auto x = layer_test::random_input(c.spec, c.tokens, 6);
  const auto ids = token_ids(c);
  const auto routing = naive::route(c.spec, storage.weights(), x.data(), c.tokens, ids.data());
  const auto exact = naive::layer(c.spec, storage.weights(), x, routing, std::nullopt);
  for (const FormatBudget& b : kBudgets) {
    SCOPED_TRACE(std::string(mxmoe::to_string(b.format)));
    const auto same = naive::layer(c.spec, storage.weights(), x, routing, b.format);
    const auto got = run_layer(c, storage.weights(), b.format, x);
    const double vs_same = naive::relative_l2(got, same);
    const double vs_exact = naive::relative_l2(got, exact);
    RecordProperty(std::string(mxmoe::to_string(b.format)) + "_error", std::to_string(vs_exact));
    EXPECT_LT(vs_same, b.same_rounding);
    EXPECT_LT(vs_exact, b.format_budget);
    EXPECT_GT(vs_exact, 0.0) << "the format must actually round something";
  }
}

INSTANTIATE_TEST_SUITE_P(Families, LayerFamily, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) { return param_info.param.name; });

}  // namespace
