// config.json -> LayerSpec for every family; each error names the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/model_config.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

ModelConfig parse(const json& j) {
  return parse_model_config(j.dump(), "config.json", "m");
}
std::string error_of(const json& j) {
  try {
    parse(j);
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

json gpt_oss_20b() {
  return {{"model_type", "gpt_oss"},
          {"num_local_experts", 32},
          {"num_experts_per_tok", 4},
          {"experts_per_token", 4},
          {"hidden_size", 2880},
          {"intermediate_size", 2880},
          {"num_hidden_layers", 24},
          {"swiglu_limit", 7.0},
          {"hidden_act", "silu"},
          {"torch_dtype", "bfloat16"},
          {"sliding_window", 128},
          {"quantization_config",
           {{"quant_method", "mxfp4"}, {"modules_to_not_convert", {"lm_head"}}}}};
}

TEST(ModelConfig, GptOss20bMatchesThePreset) {
  ModelConfig c = parse(gpt_oss_20b());
  EXPECT_EQ(c.num_layers, 24);
  EXPECT_EQ(c.quant_method, "mxfp4");
  LayerSpec want = preset("gpt-oss-20b");
  want.name = "m";
  EXPECT_EQ(c.moe, want);
}

TEST(ModelConfig, MixtralAndQwen3MatchThePresets) {
  const json mixtral = {{"model_type", "mixtral"},    {"num_local_experts", 8},
                        {"num_experts_per_tok", 2},   {"hidden_size", 4096},
                        {"intermediate_size", 14336}, {"num_hidden_layers", 32},
                        {"hidden_act", "silu"},       {"rope_theta", 1e6}};
  LayerSpec want = preset("mixtral-8x7b");
  want.name = "m";
  EXPECT_EQ(parse(mixtral).moe, want);

  const json qwen = {{"model_type", "qwen3_moe"},    {"num_experts", 128},
                     {"num_experts_per_tok", 8},     {"hidden_size", 2048},
                     {"moe_intermediate_size", 768}, {"intermediate_size", 6144},
                     {"num_hidden_layers", 48},      {"norm_topk_prob", true},
                     {"decoder_sparse_step", 1},     {"mlp_only_layers", json::array()}};
  want = preset("qwen3-30b-a3b");
  want.name = "m";
  EXPECT_EQ(parse(qwen).moe, want);
}

TEST(ModelConfig, DeepSeekV3MatchesThePresetAndMarksDenseLayers) {
  const json v3 = {{"model_type", "deepseek_v3"},
                   {"n_routed_experts", 256},
                   {"num_experts_per_tok", 8},
                   {"hidden_size", 7168},
                   {"moe_intermediate_size", 2048},
                   {"n_shared_experts", 1},
                   {"n_group", 8},
                   {"topk_group", 4},
                   {"routed_scaling_factor", 2.5},
                   {"num_hidden_layers", 61},
                   {"first_k_dense_replace", 3},
                   {"moe_layer_freq", 1},
                   {"scoring_func", "sigmoid"},
                   {"topk_method", "noaux_tc"},
                   {"norm_topk_prob", true}};
  const ModelConfig c = parse(v3);
  LayerSpec want = preset("deepseek-v3");
  want.name = "m";
  EXPECT_EQ(c.moe, want);
  EXPECT_THAT(c.non_moe_reason[2], HasSubstr("first_k_dense_replace"));
  EXPECT_EQ(c.non_moe_reason[3], "");
}

TEST(ModelConfig, FieldsMayLiveUnderTextConfig) {
  json j = {{"architectures", {"Foo"}}, {"text_config", gpt_oss_20b()}};
  j["text_config"].erase("quantization_config");
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.moe.num_experts, 32);
  EXPECT_EQ(c.architecture, "Foo");
  j["text_config"].erase("hidden_size");
  EXPECT_THAT(error_of(j), HasSubstr("'text_config.hidden_size'"));
}

TEST(ModelConfig, ErrorsNameTheField) {
  const auto without = [](const char* key) {
    json j = gpt_oss_20b();
    j.erase(key);
    return j;
  };
  EXPECT_THAT(error_of(without("num_local_experts")),
              AllOf(HasSubstr("missing field 'num_local_experts'"), HasSubstr("gpt_oss")));
  EXPECT_THAT(error_of(without("model_type")), HasSubstr("'model_type'"));

  const auto with = [](const char* key, const json& value) {
    json j = gpt_oss_20b();
    j[key] = value;
    return j;
  };
  EXPECT_THAT(error_of(with("hidden_size", "2880")), HasSubstr("field 'hidden_size'"));
  EXPECT_THAT(error_of(with("hidden_size", 2881)),
              AllOf(HasSubstr("'hidden_size'"), HasSubstr("multiple of the MX block")));
  json too_many = with("num_experts_per_tok", 33);
  too_many["experts_per_token"] = 33;
  EXPECT_THAT(error_of(too_many),
              AllOf(HasSubstr("'num_experts_per_tok'"), HasSubstr("exceeds the 32 experts")));
  EXPECT_THAT(error_of(with("hidden_act", "gelu")),
              AllOf(HasSubstr("'hidden_act'"), HasSubstr("\"gelu\" is not supported")));
  EXPECT_THAT(error_of(with("model_type", "llama")), HasSubstr("'model_type'"));
  EXPECT_THAT(error_of(with("swiglu_limit", -1)), HasSubstr("'swiglu_limit'"));
  EXPECT_THAT(error_of(with("experts_per_token", 2)), HasSubstr("'experts_per_token'"));
  EXPECT_THAT(error_of(with("quantization_config", {{"quant_method", "fp8"}})),
              AllOf(HasSubstr("'quantization_config.quant_method'"), HasSubstr("mxmoe quantize")));
  EXPECT_THAT(error_of(with("quantization_config",
                            {{"quant_method", "mxfp4"}, {"weight_block_size", {128, 128}}})),
              HasSubstr("'quantization_config.weight_block_size'"));
  EXPECT_THAT(error_of(with("quantization_config",
                            {{"quant_method", "mxfp4"}, {"mxmoe_gate_up_layout", "zigzag"}})),
              HasSubstr("'quantization_config.mxmoe_gate_up_layout'"));
}

TEST(ModelConfig, RecordedGateUpLayoutIsHonoured) {
  json j = gpt_oss_20b();
  j["quantization_config"]["mxmoe_gate_up_layout"] = "halves";
  EXPECT_EQ(parse(j).moe.gate_up_layout, GateUpLayout::halves);
}

TEST(ModelConfig, DuplicateKeysAndBadJsonAreErrors) {
  const auto error = [](const char* text) {
    try {
      parse_model_config(text, "config.json", "m");
    } catch (const LoadError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(error(R"({"model_type":"gpt_oss","model_type":"mixtral"})"),
              HasSubstr("duplicate JSON key \"model_type\""));
  EXPECT_THAT(error("{\"model_type\":"),
              AllOf(HasSubstr("config.json"), HasSubstr("invalid JSON")));
}

}  // namespace
}  // namespace mxmoe
