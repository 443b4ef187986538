// DeepSeek-V4 checkpoints as published: config.json (mlp_layer_types / num_hash_layers, the
// config class's aliases and defaults, scoring functions, the release's FP8
// quantization_config), the release naming read directly (views on the mapping, FP4 experts
// with w1/w3 apart, FP8 shared expert, hash layers), and transformers' save_pretrained naming
// through `mxmoe quantize`; every layer against the test's own float64 evaluation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "io_fixtures.hpp"
#include "model/model_config.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/layer.hpp"
#include "produce/quantize_checkpoint.hpp"
#include "test_platform.hpp"
#include "test_runtime.hpp"
#include "v4_fixtures.hpp"

namespace mxmoe {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing_io::TempDir;
using testing_io::V4Dims;

ModelConfig parse(const json& j) {
  return parse_model_config(j.dump(), "config.json", "v4");
}
std::string error_of(const json& j) {
  try {
    parse(j);
  } catch (const LoadError& e) {
    return e.what();
  }
  return "no error";
}

json v4_flash() {  // DeepSeek-V4-Flash's MoE keys as the release writes them
  json c = testing_io::v4_config(V4Dims{}, true);
  c["hidden_size"] = 4096;
  c["moe_intermediate_size"] = 2048;
  c["n_routed_experts"] = 256;
  c["num_experts_per_tok"] = 6;
  c["num_hidden_layers"] = 43;
  c["vocab_size"] = 129280;
  c["num_hash_layers"] = 3;
  return c;
}

TEST(DeepSeekV4Config, TheReleaseReadsAsThePresets) {
  const ModelConfig c = parse(v4_flash());
  LayerSpec routed = preset("deepseek-v4-flash"), hash = preset("deepseek-v4-flash-hash");
  routed.name = hash.name = "v4";
  EXPECT_EQ(c.moe, routed);
  EXPECT_EQ(c.hash_moe, hash);
  for (int n = 0; n < 43; ++n) EXPECT_EQ(c.hash_layer[static_cast<std::size_t>(n)], n < 3) << n;
  for (const std::string& why : c.non_moe_reason) EXPECT_EQ(why, "");
  EXPECT_EQ(c.spec_of(0).routing, RoutingMethod::hash);
  EXPECT_EQ(c.spec_of(3).routing, RoutingMethod::sqrtsoftplus_topk);
}

TEST(DeepSeekV4Config, MlpLayerTypesWinOverNumHashLayersAndTheDefaultIsThree) {
  json j = v4_flash();
  j["num_hidden_layers"] = 5;
  j["mlp_layer_types"] = {"moe", "hash_moe", "moe", "hash_moe", "moe"};
  j["num_hash_layers"] = 3;  // transformers folds it into mlp_layer_types; the list wins
  ModelConfig c = parse(j);
  EXPECT_EQ(c.hash_layer, (std::vector<bool>{false, true, false, true, false}));
  j.erase("mlp_layer_types");
  j["num_hash_layers"] = 1;
  EXPECT_EQ(parse(j).hash_layer, (std::vector<bool>{true, false, false, false, false}));
  j.erase("num_hash_layers");  // DeepseekV4Config's default_num_hash_layers
  EXPECT_EQ(parse(j).hash_layer, (std::vector<bool>{true, true, true, false, false}));
  j["mlp_layer_types"] = {"moe", "hash_moe"};
  EXPECT_THAT(error_of(j), HasSubstr("'mlp_layer_types': expected a list of 5 entries"));
  j["mlp_layer_types"] = {"moe", "dense", "moe", "moe", "moe"};
  EXPECT_THAT(error_of(j), HasSubstr("entry 1 is \"dense\""));
}

TEST(DeepSeekV4Config, AliasesScoringAndLimits) {
  json j = v4_flash();
  j.erase("n_routed_experts");
  j["num_local_experts"] = 256;  // DeepseekV4Config.attribute_map
  j.erase("moe_intermediate_size");
  j["intermediate_size"] = 2048;
  EXPECT_EQ(parse(j).moe.num_experts, 256);
  EXPECT_EQ(parse(j).moe.intermediate, 2048);
  j["n_routed_experts"] = 128;
  EXPECT_THAT(error_of(j), HasSubstr("fields 'n_routed_experts' and 'num_local_experts' are two "
                                     "names of one setting and disagree (128 vs 256)"));

  j = v4_flash();
  j["scoring_func"] = "sigmoid";
  ModelConfig c = parse(j);
  EXPECT_EQ(c.moe.routing, RoutingMethod::sigmoid_group_topk);
  EXPECT_EQ(c.moe.routing_params.n_group, 1);
  EXPECT_EQ(c.hash_moe.routing_params.score_function, ScoreFunction::sigmoid);
  j["scoring_func"] = "softmax";
  c = parse(j);
  EXPECT_EQ(c.moe.routing, RoutingMethod::softmax_topk);
  EXPECT_TRUE(c.moe.routing_params.selection_bias);
  EXPECT_EQ(c.hash_moe.routing_params.score_function, ScoreFunction::softmax);
  j["scoring_func"] = "tanh";
  EXPECT_THAT(error_of(j), HasSubstr("'scoring_func'"));

  j = v4_flash();
  j["norm_topk_prob"] = false;
  EXPECT_FALSE(parse(j).moe.routing_params.renormalize);
  EXPECT_FALSE(parse(j).hash_moe.routing_params.renormalize);
  j["swiglu_limit"] = 0;  // DeepSeek's code: a limit of 0 means no clamp
  EXPECT_EQ(parse(j).moe.activation, ActivationFn::silu_glu);
  j["swiglu_limit"] = -1;
  EXPECT_THAT(error_of(j), HasSubstr("'swiglu_limit'"));
  j = v4_flash();
  j.erase("routed_scaling_factor");
  j.erase("scoring_func");
  j.erase("swiglu_limit");
  j.erase("n_shared_experts");
  c = parse(j);  // the config class's defaults
  EXPECT_FLOAT_EQ(c.moe.routing_params.routed_scaling_factor, 1.5f);
  EXPECT_EQ(c.moe.routing, RoutingMethod::sqrtsoftplus_topk);
  EXPECT_FLOAT_EQ(c.moe.activation_params.limit, 10.0f);
  EXPECT_EQ(c.moe.shared_experts, 1);
}

TEST(DeepSeekV4Config, QuantizationSettingsOfTheRelease) {
  json j = v4_flash();
  EXPECT_EQ(parse(j).moe.shared_weight_format, ElementType::fp8_e4m3);
  j["expert_dtype"] = "fp8";  // the -Base checkpoints' FP8 routed experts
  EXPECT_THAT(error_of(j), HasSubstr("'expert_dtype'"));
  j = v4_flash();
  j["quantization_config"]["weight_block_size"] = {64, 64};
  EXPECT_THAT(error_of(j), HasSubstr("'quantization_config.weight_block_size'"));
  j = v4_flash();
  j["quantization_config"]["fmt"] = "e5m2";
  EXPECT_THAT(error_of(j), HasSubstr("'quantization_config.fmt'"));
  j = v4_flash();
  j["quantization_config"]["group_size"] = 32;
  EXPECT_THAT(error_of(j), HasSubstr("unknown quantization setting"));
}

// f32 activations on the reference backend: only float32 rounding of h, a, the routing
// weights and the combine differ from the float64 evaluation (~1e-7 relative each); 1e-5.
// The family default (bf16 on the fastest backend here): within bf16's 1e-2 budget.
void expect_matches(const std::string& dir, const V4Dims& d,
                    const std::vector<testing_io::V4Layer>& layers) {
  const Checkpoint c = Checkpoint::open(dir);
  ASSERT_EQ(c.num_layers(), d.layers);
  const int tokens = 9;
  const std::vector<float> x = testing_io::random_input(tokens, d.hidden, 5);
  std::vector<std::int32_t> ids;
  for (int t = 0; t < tokens; ++t) ids.push_back((t * 17 + 3) % d.vocab);
  for (int n = 0; n < d.layers; ++n) {
    SCOPED_TRACE("layer " + std::to_string(n));
    const LayerSpec spec = c.layer_spec(n);
    EXPECT_EQ(spec.routing == RoutingMethod::hash, n < d.hash_layers);
    const LayerWeights w = c.layer_weights(n);
    const std::vector<double> want =
        testing_io::v4_reference(d, layers[static_cast<std::size_t>(n)], x, ids, tokens);
    for (const bool reference : {true, false}) {
      if (!reference && !kX86BackendsCompiled) continue;  // only the judge is compiled here
      Request r;
      if (reference) {
        r.activation = ActivationFormat::f32;
        r.forced_backend = "reference";
      }
      MoeLayer layer = make_layer(spec, w, probe_hardware(), r, mxmoe::testing::test_runtime(2));
      std::vector<float> y(x.size());
      layer.forward({.tokens = tokens, .x = x.data(), .y = y.data(), .token_ids = ids.data()});
      EXPECT_LT(testing_io::relative_l2(y, want), reference ? 1e-5 : 1e-2)
          << layer.selection().chosen;
    }
  }
}

TEST(DeepSeekV4Checkpoint, ReleaseNamingReadsDirectlyAndMatchesFloat64) {
  TempDir dir;
  const V4Dims d;
  const auto layers = testing_io::write_v4_checkpoint(dir.path(), d, /*release=*/true);
  const Checkpoint c = Checkpoint::open(dir.path());
  const LayerSpec hash = c.layer_spec(0), routed = c.layer_spec(1);
  EXPECT_EQ(hash.routing, RoutingMethod::hash);
  EXPECT_EQ(hash.vocab, d.vocab);
  EXPECT_FALSE(hash.routing_params.selection_bias);
  EXPECT_EQ(routed.routing, RoutingMethod::sqrtsoftplus_topk);
  EXPECT_EQ(routed.shared_weight_format, ElementType::fp8_e4m3);
  EXPECT_EQ(routed.gate_up_layout, GateUpLayout::halves);
  // Views on the mapping, never copies: w1 and w3 of an expert are two segments, and asking
  // twice gives the same addresses; the bytes are the file's.
  const LayerWeights w = c.layer_weights(1), again = c.layer_weights(1);
  EXPECT_EQ(w.w1.parts, 2);
  EXPECT_EQ(w.w1.row_blocks(3, 0), again.w1.row_blocks(3, 0));
  EXPECT_EQ(std::memcmp(w.w1.row_blocks(3, d.intermediate + 1),
                        layers[1].w3[3].blocks.data() + d.hidden / 2,
                        static_cast<std::size_t>(d.hidden / 2)),
            0);
  EXPECT_EQ(
      std::memcmp(w.w2.row_scale(5, 7), layers[1].w2[5].scales.data() + 7 * d.intermediate / 32,
                  static_cast<std::size_t>(d.intermediate / 32)),
      0);
  EXPECT_TRUE(c.layer_weights(0).token_experts.int64);
  expect_matches(dir.path(), d, layers);
}

TEST(DeepSeekV4Checkpoint, TransformersNamingQuantizesLosslesslyAndMatchesFloat64) {
  TempDir in, out;
  const V4Dims d;
  const auto layers = testing_io::write_v4_checkpoint(in.path(), d, /*release=*/false);
  try {
    Checkpoint::open(in.path());
    ADD_FAILURE() << "BF16 experts opened";
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.layers.0.ffn.experts.0.w1.weight (BF16"));
    EXPECT_THAT(e.what(), HasSubstr("mxmoe quantize"));
  }
  produce::quantize_checkpoint(in.path(), out.path() + "/q", {});
  const Checkpoint c = Checkpoint::open(out.path() + "/q");
  EXPECT_EQ(c.layer_spec(0).routing, RoutingMethod::hash);
  EXPECT_EQ(c.layer_spec(1).shared_weight_format, ElementType::bf16);  // kept as it was
  expect_matches(out.path() + "/q", d, layers);
  // The release's FP4 experts need no quantization.
  TempDir release;
  testing_io::write_v4_checkpoint(release.path(), d, true);
  EXPECT_THROW(produce::quantize_checkpoint(release.path(), out.path() + "/r", {}), LoadError);
}

// transformers' module names (what a model saved without its conversion mapping holds):
// fused gate_up_proj [E, 2I, H] (gate rows first), e_score_correction_bias, gate_proj...
TEST(DeepSeekV4Checkpoint, TransformersModuleNamesQuantizeToo) {
  TempDir in, out;
  const V4Dims d;
  const auto layers = testing_io::write_v4_checkpoint(in.path(), d, false);
  // Rewrite the tensors under the module names.
  nlohmann::json map = nlohmann::json::object();
  for (int n = 0; n < d.layers; ++n) {
    const auto& l = layers[static_cast<std::size_t>(n)];
    testing_io::V4Tensors t;
    const std::string p = "model.layers." + std::to_string(n) + ".mlp.";
    t.add(p + "gate.weight", StDtype::BF16, testing_io::u64s({d.experts, d.hidden}),
          testing_io::bf16_bytes(l.router));
    if (l.hash)
      t.add(p + "gate.tid2eid", StDtype::I64, testing_io::u64s({d.vocab, d.top_k}),
            testing_io::raw_bytes(l.tid2eid));
    else
      t.add(p + "gate.e_score_correction_bias", StDtype::F32, testing_io::u64s({d.experts}),
            testing_io::raw_bytes(l.bias));
    std::vector<std::uint8_t> gate_up, down;
    for (int e = 0; e < d.experts; ++e) {
      for (const auto* m :
           {&l.w1[static_cast<std::size_t>(e)], &l.w3[static_cast<std::size_t>(e)]}) {
        const auto b = testing_io::bf16_of(*m);
        gate_up.insert(gate_up.end(), b.begin(), b.end());
      }
      const auto b = testing_io::bf16_of(l.w2[static_cast<std::size_t>(e)]);
      down.insert(down.end(), b.begin(), b.end());
    }
    t.add(p + "experts.gate_up_proj", StDtype::BF16,
          testing_io::u64s({d.experts, 2 * d.intermediate, d.hidden}), gate_up);
    t.add(p + "experts.down_proj", StDtype::BF16,
          testing_io::u64s({d.experts, d.hidden, d.intermediate}), down);
    t.add(p + "shared_experts.gate_proj.weight", StDtype::BF16,
          testing_io::u64s({d.intermediate, d.hidden}), testing_io::bf16_of(l.s1));
    t.add(p + "shared_experts.up_proj.weight", StDtype::BF16,
          testing_io::u64s({d.intermediate, d.hidden}), testing_io::bf16_of(l.s3));
    t.add(p + "shared_experts.down_proj.weight", StDtype::BF16,
          testing_io::u64s({d.hidden, d.intermediate}), testing_io::bf16_of(l.s2));
    const std::string shard = "model-0000" + std::to_string(n + 1) + "-of-0000" +
                              std::to_string(d.layers) + ".safetensors";
    write_safetensors(in.path() + "/" + shard, t.views());
    for (const auto& tensor : t.tensors) map[tensor.name] = shard;
  }
  std::ofstream(in.path() + "/model.safetensors.index.json")
      << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump();
  produce::quantize_checkpoint(in.path(), out.path() + "/q", {});
  expect_matches(out.path() + "/q", d, layers);
}

TEST(DeepSeekV4Checkpoint, MalformedTensorsAreNamed) {
  TempDir dir;
  V4Dims d;
  auto layers = testing_io::write_v4_checkpoint(dir.path(), d, true);
  // A tid2eid entry outside [0, E): the layer refuses to load, naming the token.
  layers[0].tid2eid[7 * 2 + 1] = 6;
  const testing_io::V4Tensors t = testing_io::v4_tensors(d, 0, layers[0], true);
  write_safetensors(dir.path() + "/model-00001-of-00002.safetensors", t.views());
  try {
    Checkpoint::open(dir.path()).layer_weights(0);
    ADD_FAILURE() << "accepted a bad tid2eid";
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("token 7 slot 1 names expert 6"));
  }
  // The routed layer still loads.
  EXPECT_NO_THROW(Checkpoint::open(dir.path()).layer_weights(1));
}

// Per-expert tensors, scanned per expert: an expert-parallel rank reads the scales of its
// experts only, so a bad scale stops only the ranks that hold it.
TEST(DeepSeekV4Checkpoint, ARankScansOnlyTheScalesOfItsExperts) {
  TempDir dir;
  V4Dims d;
  auto layers = testing_io::write_v4_checkpoint(dir.path(), d, true);
  layers[1].w3[4].scales[9] = 0xFF;  // expert 4's up projection
  const testing_io::V4Tensors t = testing_io::v4_tensors(d, 1, layers[1], true);
  write_safetensors(dir.path() + "/model-00002-of-00002.safetensors", t.views());
  const Checkpoint c = Checkpoint::open(dir.path());
  EXPECT_NO_THROW((void)c.layer_weights(1, {{0, 4}, {5, 6}}));
  for (const std::vector<ExpertRange>& experts :
       {std::vector<ExpertRange>{{4, 5}}, std::vector<ExpertRange>{{0, 6}}}) {
    try {
      (void)c.layer_weights(1, experts);
      ADD_FAILURE() << "accepted the 0xFF scale of expert 4";
    } catch (const LoadError& e) {
      EXPECT_THAT(e.what(), HasSubstr("experts.4.w3.scale"));
    }
  }
  EXPECT_THROW((void)c.layer_weights(1), LoadError);
}

}  // namespace
}  // namespace mxmoe
