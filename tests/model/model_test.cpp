// Presets, validate(LayerSpec), validate(spec, weights), DenseView and LayerStorage::random.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "mxfp4_copy.hpp"
#include "mxmoe/format.hpp"
#include "mxmoe/weights.hpp"

namespace {

using mxmoe::LayerSpec;

TEST(Presets, RealShapes) {
  struct Want {
    const char* name;
    int e, k, h, i, shared, shared_i;
    mxmoe::RoutingMethod routing;
    mxmoe::ActivationFn act;
  };
  using mxmoe::ActivationFn;
  using mxmoe::RoutingMethod;
  const Want wants[] = {
      {"gpt-oss-20b", 32, 4, 2880, 2880, 0, 0, RoutingMethod::topk_softmax,
       ActivationFn::swiglu_oai},
      {"gpt-oss-120b", 128, 4, 2880, 2880, 0, 0, RoutingMethod::topk_softmax,
       ActivationFn::swiglu_oai},
      {"mixtral-8x7b", 8, 2, 4096, 14336, 0, 0, RoutingMethod::softmax_topk,
       ActivationFn::silu_glu},
      {"qwen3-30b-a3b", 128, 8, 2048, 768, 0, 0, RoutingMethod::softmax_topk,
       ActivationFn::silu_glu},
      {"deepseek-v3", 256, 8, 7168, 2048, 1, 2048, RoutingMethod::sigmoid_group_topk,
       ActivationFn::silu_glu},
      {"deepseek-v4-flash", 256, 6, 4096, 2048, 1, 2048, RoutingMethod::sqrtsoftplus_topk,
       ActivationFn::silu_glu_clamp},
      {"deepseek-v4-flash-hash", 256, 6, 4096, 2048, 1, 2048, RoutingMethod::hash,
       ActivationFn::silu_glu_clamp},
      {"tiny", 8, 2, 256, 256, 0, 0, RoutingMethod::topk_softmax, ActivationFn::swiglu_oai},
  };
  EXPECT_EQ(mxmoe::preset_names().size(), std::size(wants));
  for (const Want& w : wants) {
    SCOPED_TRACE(w.name);
    const LayerSpec s = mxmoe::preset(w.name);
    EXPECT_EQ(s.name, w.name);
    EXPECT_EQ(s.num_experts, w.e);
    EXPECT_EQ(s.top_k, w.k);
    EXPECT_EQ(s.hidden, w.h);
    EXPECT_EQ(s.intermediate, w.i);
    EXPECT_EQ(s.shared_experts, w.shared);
    EXPECT_EQ(s.shared_intermediate, w.shared_i);
    EXPECT_EQ(s.routing, w.routing);
    EXPECT_EQ(s.activation, w.act);
    EXPECT_NO_THROW(mxmoe::validate(s));
  }
  const LayerSpec oss = mxmoe::preset("gpt-oss-20b");
  EXPECT_TRUE(oss.expert_bias && oss.router_bias);
  EXPECT_EQ(oss.gate_up_layout, mxmoe::GateUpLayout::interleaved);
  EXPECT_FLOAT_EQ(oss.activation_params.alpha, 1.702f);
  EXPECT_FLOAT_EQ(oss.activation_params.limit, 7.0f);
  // DeepSeek-V4-Flash as released: the shared expert in FP8; hash layers route by token id
  // over the 129280-token vocabulary with the same sqrt(softplus) scores, no selection bias.
  const LayerSpec v4 = mxmoe::preset("deepseek-v4-flash");
  EXPECT_EQ(v4.shared_weight_format, mxmoe::ElementType::fp8_e4m3);
  EXPECT_TRUE(v4.routing_params.selection_bias);
  EXPECT_FLOAT_EQ(v4.routing_params.routed_scaling_factor, 1.5f);
  EXPECT_FLOAT_EQ(v4.activation_params.limit, 10.0f);
  const LayerSpec v4h = mxmoe::preset("deepseek-v4-flash-hash");
  EXPECT_EQ(v4h.vocab, 129280);
  EXPECT_FALSE(v4h.routing_params.selection_bias);
  EXPECT_EQ(v4h.routing_params.score_function, mxmoe::ScoreFunction::sqrtsoftplus);
  const LayerSpec v3 = mxmoe::preset("deepseek-v3");
  EXPECT_EQ(v3.routing_params.n_group, 8);
  EXPECT_EQ(v3.routing_params.topk_group, 4);
  EXPECT_FLOAT_EQ(v3.routing_params.routed_scaling_factor, 2.5f);
  EXPECT_TRUE(v3.routing_params.selection_bias);
  EXPECT_EQ(mxmoe::preset("mixtral-8x7b").gate_up_layout, mxmoe::GateUpLayout::halves);
}

TEST(Presets, UnknownNameListsTheValidOnes) {
  try {
    mxmoe::preset("gpt-oss-21b");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("deepseek-v4-flash"), std::string::npos);
  }
}

TEST(ValidateSpec, RejectsNamingTheField) {
  const auto rejects = [](void (*edit)(LayerSpec&), const char* field) {
    LayerSpec s = mxmoe::preset("deepseek-v3");
    edit(s);
    try {
      mxmoe::validate(s);
      ADD_FAILURE() << "accepted an invalid " << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  rejects([](LayerSpec& s) { s.top_k = 257; }, "top_k");
  rejects([](LayerSpec& s) { s.top_k = 0; }, "top_k");
  rejects([](LayerSpec& s) { s.num_experts = 0; }, "num_experts");
  rejects([](LayerSpec& s) { s.hidden = 7169; }, "hidden");
  rejects([](LayerSpec& s) { s.intermediate = 48; }, "intermediate");
  rejects([](LayerSpec& s) { s.routing_params.n_group = 3; }, "n_group");
  rejects([](LayerSpec& s) { s.routing_params.topk_group = 9; }, "topk_group");
  rejects([](LayerSpec& s) { s.routing_params.topk_group = 1, s.top_k = 33; }, "top_k");
  rejects([](LayerSpec& s) { s.routing_params.routed_scaling_factor = NAN; },
          "routed_scaling_factor");
  rejects([](LayerSpec& s) { s.shared_intermediate = 100; }, "shared_intermediate");
  rejects([](LayerSpec& s) { s.shared_experts = 0; }, "shared_intermediate");
  rejects([](LayerSpec& s) { s.routing = mxmoe::RoutingMethod::topk_softmax; }, "selection_bias");
  rejects(
      [](LayerSpec& s) {
        s.activation = mxmoe::ActivationFn::silu_glu_clamp, s.activation_params.limit = -1;
      },
      "limit");
}

TEST(DenseView, ReadsF32AndBf16) {
  const float f[] = {1.5f, -2.25f};
  const std::uint16_t b[] = {mxmoe::f32_to_bf16(3.0f), mxmoe::f32_to_bf16(-0.5f)};
  const mxmoe::DenseView vf{mxmoe::ElementType::f32, f, 1, 2};
  const mxmoe::DenseView vb{mxmoe::ElementType::bf16, b, 1, 2};
  EXPECT_EQ(vf.at(1), -2.25f);
  EXPECT_EQ(vb.at(0), 3.0f);
  EXPECT_EQ(vb.at(1), -0.5f);
}

LayerSpec small_spec() {
  LayerSpec s = mxmoe::preset("deepseek-v3");
  s.num_experts = 8;
  s.top_k = 2;
  s.hidden = 64;
  s.intermediate = 32;
  s.shared_intermediate = 64;
  s.routing_params.n_group = 4;
  s.routing_params.topk_group = 2;
  return s;
}

TEST(LayerStorage, RandomIsDeterministicValidAndExercisesTheFormat) {
  const LayerSpec s = small_spec();
  const auto a = mxmoe::LayerStorage::random(s, 7);
  const auto b = mxmoe::LayerStorage::random(s, 7);
  const auto c = mxmoe::LayerStorage::random(s, 8);
  EXPECT_NO_THROW(mxmoe::validate(s, a.weights()));
  const auto& w = a.weights();
  const mxmoe::testing::Mxfp4Copy wa(w.w1), wb(b.weights().w1), wc(c.weights().w1);
  EXPECT_EQ(wa.blocks, wb.blocks);
  EXPECT_EQ(wa.scales, wb.scales);
  EXPECT_NE(wa.blocks, wc.blocks);
  bool seen[16] = {};
  for (const std::uint8_t byte : wa.blocks) {
    seen[byte & 0xF] = true;
    seen[byte >> 4] = true;
  }
  for (bool v : seen) EXPECT_TRUE(v);
  EXPECT_FALSE(w.selection_bias.empty());
  EXPECT_FALSE(w.shared_w1.empty());
  EXPECT_TRUE(w.b1.empty());  // the spec has no expert biases
}

TEST(ValidateWeights, NamesTheTensor) {
  const LayerSpec s = small_spec();
  const auto storage = mxmoe::LayerStorage::random(s, 1);
  const auto expect_error = [&](mxmoe::LayerWeights w, const char* tensor) {
    try {
      mxmoe::validate(s, w);
      ADD_FAILURE() << "accepted a bad " << tensor;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(tensor), std::string::npos) << e.what();
    }
  };
  mxmoe::LayerWeights w = storage.weights();
  w.w2.cols = 64;
  expect_error(w, "w2");
  w = storage.weights();
  w.selection_bias = {};
  expect_error(w, "selection_bias");
  w = storage.weights();
  w.shared_w1 = {};
  expect_error(w, "shared_w1");
  w = storage.weights();
  w.router_weight.cols = 32;
  expect_error(w, "router_weight");
  // A NaN scale (0xFF) in the expert weights: in the last block of the last row.
  w = storage.weights();
  mxmoe::testing::Mxfp4Copy copy(w.w1);
  copy.scales.back() = mxmoe::kE8m0Nan;
  w.w1 = copy.view();
  expect_error(w, "0xFF");
  // A NaN or Inf in a dense tensor (as the checkpoint reader refuses it in a file), named
  // with its row and column.
  std::vector<float> router(static_cast<std::size_t>(s.num_experts * s.hidden), 0.5f);
  router[static_cast<std::size_t>(3 * s.hidden + 9)] = std::numeric_limits<float>::infinity();
  w = storage.weights();
  w.router_weight.data = router.data();
  w.router_weight.dtype = mxmoe::ElementType::f32;
  expect_error(w, "router_weight holds NaN or Inf at row 3, column 9");
  std::vector<std::uint16_t> bias(static_cast<std::size_t>(s.num_experts), 0x3F80);  // 1.0
  bias[5] = 0xFFC0;                                                                  // NaN
  w = storage.weights();
  w.selection_bias = {mxmoe::ElementType::bf16, bias.data(), 1, s.num_experts};
  expect_error(w, "selection_bias holds NaN or Inf at row 0, column 5");
}

// As with the scales, an expert-parallel rank scans the biases of its own experts only.
TEST(ValidateWeights, ARankScansTheBiasesOfItsExpertsOnly) {
  const LayerSpec s = mxmoe::preset("tiny");  // the gpt-oss math: expert biases
  const auto storage = mxmoe::LayerStorage::random(s, 2);
  mxmoe::LayerWeights w = storage.weights();
  ASSERT_EQ(w.b1.dtype, mxmoe::ElementType::f32);
  const auto* first = static_cast<const float*>(w.b1.data);
  std::vector<float> b1(first, first + w.b1.rows * w.b1.cols);
  b1[static_cast<std::size_t>(3 * w.b1.cols + 7)] = std::numeric_limits<float>::quiet_NaN();
  w.b1.data = b1.data();
  const mxmoe::ExpertRange others[] = {{0, 3}, {4, 8}}, mine[] = {{2, 4}};
  EXPECT_NO_THROW(mxmoe::validate(s, w, others));
  try {
    mxmoe::validate(s, w, mine);
    ADD_FAILURE() << "accepted a NaN bias of a scanned expert";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "b1 holds NaN or Inf at row 3, column 7");
  }
}

}  // namespace
