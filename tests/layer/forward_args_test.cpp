// MoeLayer::forward(const ForwardArgs&): the one place that checks a call's combination of
// fields. Each combination no form computes is refused naming its fields, before any work; the
// combinations the former overloads took keep their bits (and bf16 with router logits, which
// the one path computes as naturally, is the float32 path on the widened input, rounded).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "layer/layer_fixture.hpp"
#include "mxmoe/format.hpp"
#include "routing/routing.hpp"
#include "runtime/layer_steps.hpp"
#include "test_runtime.hpp"

namespace {

using mxmoe::ActivationFormat;
using mxmoe::ForwardArgs;
using ::testing::HasSubstr;

constexpr std::int64_t kTokens = 3;

struct Fixture {
  mxmoe::LayerSpec spec = layer_test::shrink("qwen3-30b-a3b", 8, 2, 64, 32);
  mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 71);
  mxmoe::MoeLayer layer = mxmoe::testing::test_layer(
      storage.weights(), layer_test::reference_selection(spec, ActivationFormat::f32));
  std::vector<float> x = layer_test::random_input(spec, kTokens, 72);
  std::vector<float> y = std::vector<float>(x.size(), -7.0f);
  std::vector<std::uint16_t> xb = std::vector<std::uint16_t>(x.size(), 0);
  std::vector<std::uint16_t> yb = std::vector<std::uint16_t>(x.size(), 7);
  std::vector<float> logits = std::vector<float>(kTokens * 8, 0.5f);
  std::vector<std::int32_t> ids = {0, 1, 2, 3, 4, 5};
  std::vector<float> weights = std::vector<float>(6, 0.5f);
  std::vector<std::int32_t> token_ids = {1, 2, 3};
};

std::string refusal(mxmoe::MoeLayer& layer, const ForwardArgs& args) {
  try {
    layer.forward(args);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(ForwardArgs, EachCombinationNoFormComputesIsRefusedNamingItsFields) {
  Fixture f;
  const std::int64_t m = kTokens;
  const float* x = f.x.data();
  float* y = f.y.data();
  const std::uint16_t* xb = f.xb.data();
  std::uint16_t* yb = f.yb.data();
  const struct {
    ForwardArgs args;
    const char* message;
  } cases[] = {
      {{.tokens = m, .x = x, .x_bf16 = xb, .y = y},
       "forward: x and x_bf16 are both set: pass one input"},
      {{.tokens = m, .x = x, .y = y, .y_bf16 = yb},
       "forward: y and y_bf16 are both set: pass one output"},
      {{.tokens = m, .x = x, .y_bf16 = yb},
       "forward: x is float32 and y_bf16 bf16: pass x with y, or x_bf16 with y_bf16"},
      {{.tokens = m, .x_bf16 = xb, .y = y},
       "forward: x_bf16 is bf16 and y float32: pass x with y, or x_bf16 with y_bf16"},
      {{.tokens = m, .y = y}, "forward: x and x_bf16 are both null: pass the input"},
      {{.tokens = m, .x = x}, "forward: y and y_bf16 are both null: pass the output"},
      {{.tokens = m, .x = x, .y = y, .expert_ids = f.ids.data()},
       "forward: expert_ids without expert_weights: pass both"},
      {{.tokens = m, .x = x, .y = y, .expert_weights = f.weights.data()},
       "forward: expert_weights without expert_ids: pass both"},
      {{.tokens = m,
        .x = x,
        .y = y,
        .router_logits = f.logits.data(),
        .expert_ids = f.ids.data(),
        .expert_weights = f.weights.data()},
       "forward: router_logits and expert_ids/expert_weights are both set: pass one routing"},
      {{.tokens = m,
        .x = x,
        .y = y,
        .token_ids = f.token_ids.data(),
        .expert_ids = f.ids.data(),
        .expert_weights = f.weights.data()},
       "forward: token_ids with expert_ids: the ids route by the router, which the given "
       "routing replaces; pass one"},
      {{.tokens = m,
        .x_bf16 = xb,
        .y_bf16 = yb,
        .token_ids = f.token_ids.data(),
        .router_logits = f.logits.data()},
       "forward: token_ids with router_logits: the ids route by the router, which the logits "
       "replace; pass one"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.message);
    EXPECT_EQ(refusal(f.layer, c.args), c.message);
    EXPECT_EQ(f.y[0], -7.0f);  // refused before any work
    EXPECT_EQ(f.yb[0], 7);
  }
  // Checked whatever the token count: a combination is wrong before it is empty.
  ForwardArgs empty = cases[0].args;
  empty.tokens = 0;
  EXPECT_EQ(refusal(f.layer, empty), cases[0].message);
  // Null arrays of 0 tokens are empty arrays: nothing to do.
  EXPECT_EQ(refusal(f.layer, {}), "no error");
  EXPECT_EQ(refusal(f.layer, {.tokens = 0, .x = x}), "no error");
}

// The checks the former overloads made keep their words, and name the form as the hosts do.
TEST(ForwardArgs, TheFormerFormsChecksKeepTheirMessages) {
  Fixture f;
  const std::int64_t too_many = f.layer.max_tokens() + 1;
  EXPECT_THAT(refusal(f.layer, {.tokens = too_many, .x = f.x.data(), .y = f.y.data()}),
              HasSubstr("forward: "));
  EXPECT_THAT(refusal(f.layer, {.tokens = too_many, .x_bf16 = f.xb.data(), .y_bf16 = f.yb.data()}),
              HasSubstr("forward_bf16: "));
  EXPECT_THAT(
      refusal(
          f.layer,
          {.tokens = too_many, .x = f.x.data(), .y = f.y.data(), .router_logits = f.logits.data()}),
      HasSubstr("forward_logits: "));
  EXPECT_THAT(refusal(f.layer, {.tokens = too_many,
                                .x = f.x.data(),
                                .y = f.y.data(),
                                .expert_ids = f.ids.data(),
                                .expert_weights = f.weights.data()}),
              HasSubstr("forward_routed: "));
  EXPECT_THAT(refusal(f.layer, {.tokens = too_many,
                                .x_bf16 = f.xb.data(),
                                .y_bf16 = f.yb.data(),
                                .expert_ids = f.ids.data(),
                                .expert_weights = f.weights.data()}),
              HasSubstr("forward_routed_bf16: "));
  std::vector<std::int32_t> duplicate = f.ids;
  duplicate[1] = duplicate[0];
  EXPECT_THAT(refusal(f.layer, {.tokens = kTokens,
                                .x = f.x.data(),
                                .y = f.y.data(),
                                .expert_ids = duplicate.data(),
                                .expert_weights = f.weights.data()}),
              HasSubstr("token 0"));
  EXPECT_EQ(f.y[0], -7.0f);
}

// bf16 with router logits (no former overload took both): the one path widens x, routes from
// the logits and rounds y, as the bf16 form does with the router.
TEST(ForwardArgs, Bf16WithRouterLogitsIsTheFloatPathOnTheWidenedInput) {
  Fixture f;
  std::vector<float> logits(static_cast<std::size_t>(kTokens * f.spec.num_experts));
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 5) * 0.25f;
  std::vector<float> xr(f.x.size()), yr(f.x.size());
  for (std::size_t i = 0; i < f.x.size(); ++i) {
    f.xb[i] = mxmoe::f32_to_bf16(f.x[i]);
    xr[i] = mxmoe::bf16_to_f32(f.xb[i]);
  }
  f.layer.forward({.tokens = kTokens,
                   .x_bf16 = f.xb.data(),
                   .y_bf16 = f.yb.data(),
                   .router_logits = logits.data()});
  f.layer.forward(
      {.tokens = kTokens, .x = xr.data(), .y = yr.data(), .router_logits = logits.data()});
  for (std::size_t i = 0; i < f.x.size(); ++i) ASSERT_EQ(f.yb[i], mxmoe::f32_to_bf16(yr[i])) << i;
}

// A hash layer takes the routing given (as before) but no logits.
TEST(ForwardArgs, AHashLayerTakesGivenRoutingButNotLogits) {
  mxmoe::LayerSpec s = layer_test::shrink("deepseek-v4-flash-hash", 8, 2, 64, 32);
  s.vocab = 40;
  const auto storage = mxmoe::LayerStorage::random(s, 73);
  mxmoe::MoeLayer layer = mxmoe::testing::test_layer(
      storage.weights(), layer_test::reference_selection(s, ActivationFormat::f32));
  const auto x = layer_test::random_input(s, 2, 74);
  std::vector<float> y(x.size()), routed(x.size());
  const std::int32_t token_ids[2] = {5, 17};
  layer.forward({.tokens = 2, .x = x.data(), .y = y.data(), .token_ids = token_ids});
  // The routing tid2eid gives, passed back: the same bits.
  std::vector<std::int32_t> ids(4);
  std::vector<float> w(4);
  mxmoe::MoeLayer::Steps::route(layer, x.data(), token_ids, 2, ids.data(), w.data());
  layer.forward({.tokens = 2,
                 .x = x.data(),
                 .y = routed.data(),
                 .expert_ids = ids.data(),
                 .expert_weights = w.data()});
  EXPECT_EQ(std::memcmp(y.data(), routed.data(), y.size() * sizeof(float)), 0);
  std::vector<float> logits(2 * 8, 0.0f);
  EXPECT_THAT(
      refusal(layer, {.tokens = 2, .x = x.data(), .y = y.data(), .router_logits = logits.data()}),
      HasSubstr("forward_logits: layer '" + s.name + "' is hash-routed"));
}

}  // namespace
