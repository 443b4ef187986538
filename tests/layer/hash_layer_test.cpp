// A hash-routed layer (DeepSeek-V4's first layers) through MoeLayer: token ids are an input
// of forward, checked before any work; the other layers ignore them.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "layer/layer_fixture.hpp"
#include "mxmoe/hardware.hpp"
#include "test_platform.hpp"
#include "test_runtime.hpp"

namespace {

using mxmoe::ActivationFormat;
using mxmoe::LayerSpec;

LayerSpec hash_spec() {
  LayerSpec s = layer_test::shrink("deepseek-v4-flash-hash", 8, 2, 64, 32);
  s.vocab = 40;
  return s;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(HashLayer, TokenIdsAreRequiredAndChecked) {
  const LayerSpec s = hash_spec();
  const auto storage = mxmoe::LayerStorage::random(s, 4);
  mxmoe::MoeLayer layer = mxmoe::testing::test_layer(
      storage.weights(), layer_test::reference_selection(s, ActivationFormat::f32));
  const auto x = layer_test::random_input(s, 3, 1);
  std::vector<float> y(x.size(), -7.0f), logits(3 * 8, 0.0f);
  EXPECT_NE(error_of([&] {
              layer.forward({.tokens = 3, .x = x.data(), .y = y.data()});
            }).find("pass the tokens' ids"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] {
        layer.forward({.tokens = 3, .x = x.data(), .y = y.data(), .router_logits = logits.data()});
      }).find("hash-routed"),
      std::string::npos);
  const std::int32_t bad[3] = {0, 40, 2};
  EXPECT_EQ(error_of([&] {
              layer.forward({.tokens = 3, .x = x.data(), .y = y.data(), .token_ids = bad});
            }),
            "token id 40 of token 1 is out of range [0, 40)");
  EXPECT_EQ(y[0], -7.0f);  // refused before any work: y untouched
  // Without ids (null token_ids) a call is refused before its tokens and x are checked, naming
  // the form; with 0 tokens there is nothing to route, so null ids are an empty array.
  std::vector<std::uint16_t> x16(x.size()), y16(x.size());
  EXPECT_EQ(
      error_of([&] { layer.forward({.tokens = 3, .x_bf16 = x16.data(), .y_bf16 = y16.data()}); }),
      "forward_bf16: layer '" + s.name +
          "' is hash-routed (DeepSeek-V4 tid2eid): pass the tokens' ids");
  EXPECT_EQ(error_of([&] { layer.forward({.tokens = 0, .x = x.data(), .y = y.data()}); }),
            "no error");
  const std::int32_t ids[3] = {0, 39, 0};
  layer.forward({.tokens = 3, .x = x.data(), .y = y.data(), .token_ids = ids});
  // Token 0 and token 2 have the same id but different x; the same id, same x gives the same
  // bits at any position.
  std::vector<float> again(x.size());
  std::vector<float> x2 = x;
  std::copy(x.begin(), x.begin() + 64, x2.begin() + 128);
  layer.forward({.tokens = 3, .x = x2.data(), .y = again.data(), .token_ids = ids});
  EXPECT_EQ(std::memcmp(again.data() + 128, y.data(), 64 * sizeof(float)), 0);
  // bf16 in and out with ids: the float path on bf16-rounded inputs, rounded.
  std::vector<std::uint16_t> xb(x.size()), yb(x.size());
  std::vector<float> xr(x.size()), yr(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    xb[i] = mxmoe::f32_to_bf16(x[i]);
    xr[i] = mxmoe::bf16_to_f32(xb[i]);
  }
  layer.forward({.tokens = 3, .x_bf16 = xb.data(), .y_bf16 = yb.data(), .token_ids = ids});
  layer.forward({.tokens = 3, .x = xr.data(), .y = yr.data(), .token_ids = ids});
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(yb[i], mxmoe::f32_to_bf16(yr[i])) << i;
}

// The tid2eid table is read in place whatever the backend: a hash layer reads its views even
// when its backend packed the experts, so a host must keep them (reads_weight_views).
TEST(HashLayer, ReadsItsTableInPlaceEvenWhenTheExpertsArePacked) {
  MXMOE_REQUIRE_X86_BACKENDS();
  const LayerSpec s = hash_spec();
  const auto storage = mxmoe::LayerStorage::random(s, 4);
  mxmoe::Request r;
  r.threads = 1;
  mxmoe::MoeLayer layer = mxmoe::make_layer(s, storage.weights(), mxmoe::probe_hardware(), r,
                                            mxmoe::testing::test_runtime(1));
  EXPECT_GT(layer.packed_weight_bytes(), 0u);
  EXPECT_TRUE(layer.reads_weight_views());
}

// Ids are an input every layer accepts, so a model can pass them to all layers: a routed
// layer ignores them.
TEST(HashLayer, RoutedLayersIgnoreTokenIds) {
  const LayerSpec s = layer_test::shrink("deepseek-v4-flash", 8, 2, 64, 32);
  const auto storage = mxmoe::LayerStorage::random(s, 5);
  mxmoe::MoeLayer layer = mxmoe::testing::test_layer(
      storage.weights(), layer_test::reference_selection(s, ActivationFormat::f32));
  const auto x = layer_test::random_input(s, 2, 2);
  std::vector<float> a(x.size()), b(x.size());
  const std::int32_t ids[2] = {123456, -5};  // meaningless for a routed layer
  layer.forward({.tokens = 2, .x = x.data(), .y = a.data()});
  layer.forward({.tokens = 2, .x = x.data(), .y = b.data(), .token_ids = ids});
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

}  // namespace
