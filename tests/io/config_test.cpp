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

// Issue 38 (finding 11): a gpt-oss config.json with a text_config too was read from
// text_config by mxmoe and from the top level by transformers (GptOssConfig nests none, nor do
// the other four families' classes): two models from one file. Refused naming both.
TEST(ModelConfig, AFamilyAtTheTopLevelWithATextConfigIsRefused) {
  json other = gpt_oss_20b();
  other["num_local_experts"] = 8;
  json j = gpt_oss_20b();
  j["text_config"] = other;
  EXPECT_THAT(error_of(j), AllOf(HasSubstr("model_type \"gpt_oss\" at the top level"),
                                 HasSubstr("'text_config'"), HasSubstr("remove one")));
  j["model_type"] = "mixtral";
  EXPECT_THAT(error_of(j), HasSubstr("model_type \"mixtral\" at the top level"));
  // A wrapper (another model_type at the top level) is still read from its text_config.
  j["model_type"] = "some_vlm";
  EXPECT_EQ(parse(j).moe.num_experts, 8);
}

// DeepSeek's MTP layers after the last (num_nextn_predict_layers, transformers' default 1;
// DeepseekV3Config's alias num_mtp_layers); no other family has any.
TEST(ModelConfig, MtpLayersAreDeepSeeksOnly) {
  json j = gpt_oss_20b();
  j["num_nextn_predict_layers"] = 1;
  EXPECT_EQ(parse(j).mtp_layers, 0);
  json v3 = {{"model_type", "deepseek_v3"}, {"n_routed_experts", 8},
             {"num_experts_per_tok", 2},    {"hidden_size", 64},
             {"moe_intermediate_size", 32}, {"num_hidden_layers", 2},
             {"hidden_act", "silu"}};
  EXPECT_EQ(parse(v3).mtp_layers, 1);
  v3["num_mtp_layers"] = 2;
  EXPECT_EQ(parse(v3).mtp_layers, 2);
  v3["num_nextn_predict_layers"] = 0;
  EXPECT_THAT(error_of(v3), HasSubstr("num_mtp_layers"));  // two spellings, two values
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

// Every key alias of the families' transformers config classes (their attribute_map) reads as
// its canonical key; two spellings that disagree are refused, naming both.
TEST(ModelConfig, HuggingFaceKeyAliasesOfEveryFamily) {
  struct Case {
    json config;
    const char* canonical;
    const char* alias;
  };
  json qwen = {{"model_type", "qwen3_moe"},    {"num_experts", 128},
               {"num_experts_per_tok", 8},     {"hidden_size", 2048},
               {"moe_intermediate_size", 768}, {"num_hidden_layers", 4},
               {"norm_topk_prob", true}};
  json mixtral = {{"model_type", "mixtral"},    {"num_local_experts", 8},
                  {"num_experts_per_tok", 2},   {"hidden_size", 4096},
                  {"intermediate_size", 14336}, {"num_hidden_layers", 2}};
  json v3 = {{"model_type", "deepseek_v3"},
             {"n_routed_experts", 256},
             {"num_experts_per_tok", 8},
             {"hidden_size", 7168},
             {"moe_intermediate_size", 2048},
             {"num_hidden_layers", 4},
             {"n_group", 8},
             {"topk_group", 4}};
  json v4 = {{"model_type", "deepseek_v4"},   {"n_routed_experts", 256},
             {"num_experts_per_tok", 6},      {"hidden_size", 4096},
             {"moe_intermediate_size", 2048}, {"num_hidden_layers", 4}};
  json oss = gpt_oss_20b();
  oss.erase("experts_per_token");
  const Case cases[] = {
      {qwen, "num_experts", "num_local_experts"},  // what transformers 5 writes
      {mixtral, "num_local_experts", "num_experts"},
      {oss, "num_local_experts", "num_experts"},
      {oss, "num_experts_per_tok", "experts_per_token"},
      {v3, "n_routed_experts", "num_local_experts"},
      {v4, "n_routed_experts", "num_local_experts"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.config["model_type"].get<std::string>() + ": " + c.alias);
    const LayerSpec canonical = parse(c.config).moe;
    json aliased = c.config;
    aliased[c.alias] = aliased[c.canonical];
    aliased.erase(c.canonical);
    EXPECT_EQ(parse(aliased).moe, canonical);
    json both = c.config;
    both[c.alias] = both[c.canonical];
    EXPECT_EQ(parse(both).moe, canonical);  // two spellings that agree
    both[c.alias] = both[c.canonical].get<int>() / 2;
    EXPECT_THAT(error_of(both), AllOf(HasSubstr(c.canonical), HasSubstr(c.alias),
                                      HasSubstr("two names of one setting and disagree")));
    json neither = c.config;
    neither.erase(c.canonical);
    EXPECT_THAT(error_of(neither),
                HasSubstr(std::string("missing field '") + c.canonical + "' or '" + c.alias + "'"));
  }
}

// gpt-oss's swiglu_alpha is honoured (not replaced by 1.702) and checked; hidden_act swish is
// transformers' other name of silu.
TEST(ModelConfig, ActivationFieldsAreHonouredOrRefused) {
  json j = gpt_oss_20b();
  j["swiglu_alpha"] = 1.5;
  EXPECT_FLOAT_EQ(parse(j).moe.activation_params.alpha, 1.5f);
  EXPECT_FLOAT_EQ(parse(gpt_oss_20b()).moe.activation_params.alpha, 1.702f);
  for (const json& bad : {json(-1.0), json(0), json("1.7"), json(1e300)}) {
    j["swiglu_alpha"] = bad;
    EXPECT_THAT(error_of(j), HasSubstr("'swiglu_alpha'")) << bad.dump();
  }
  json swish = gpt_oss_20b();
  swish["hidden_act"] = "swish";
  EXPECT_EQ(parse(swish).moe, parse(gpt_oss_20b()).moe);
}

// Every size read from the file is bounded before it is used: a hundred million layers no
// longer make `info` run for a minute at 5 GB, two billion no longer throw std::bad_alloc.
TEST(ModelConfig, SizesAreRangeCheckedBeforeUse) {
  const auto with = [](const char* key, const json& value) {
    json j = gpt_oss_20b();
    j[key] = value;
    return j;
  };
  EXPECT_THAT(error_of(with("num_hidden_layers", 100000000)),
              HasSubstr("'num_hidden_layers': expected an integer in [1, 16384], got 100000000"));
  EXPECT_THAT(error_of(with("num_hidden_layers", 2000000000)), HasSubstr("[1, 16384]"));
  EXPECT_THAT(error_of(with("num_hidden_layers", 1e8)), HasSubstr("'num_hidden_layers'"));
  EXPECT_THAT(error_of(with("num_hidden_layers", -3)), HasSubstr("'num_hidden_layers'"));
  EXPECT_THAT(error_of(with("num_local_experts", 1000000000)),
              HasSubstr("'num_local_experts': expected an integer in [1, 65536]"));
  EXPECT_THAT(error_of(with("hidden_size", 1099511627776)),
              HasSubstr("'hidden_size': expected an integer in [32, 262144]"));
  EXPECT_THAT(error_of(with("intermediate_size", 18446744073709551615ull)),
              HasSubstr("'intermediate_size'"));
  EXPECT_EQ(parse(with("num_hidden_layers", 16384)).non_moe_reason.size(), 16384u);

  json qwen = {{"model_type", "qwen3_moe"},   {"num_experts", 8},
               {"num_experts_per_tok", 2},    {"hidden_size", 64},
               {"moe_intermediate_size", 32}, {"num_hidden_layers", 4},
               {"mlp_only_layers", {1, 4}}};
  EXPECT_THAT(error_of(qwen), HasSubstr("'mlp_only_layers': expected layer indices in [0, 4)"));
  qwen["mlp_only_layers"] = {1, 1099511627776};
  EXPECT_THAT(error_of(qwen), HasSubstr("'mlp_only_layers'"));
  json v3 = {{"model_type", "deepseek_v3"}, {"n_routed_experts", 16},
             {"num_experts_per_tok", 2},    {"hidden_size", 64},
             {"moe_intermediate_size", 32}, {"num_hidden_layers", 2},
             {"n_shared_experts", 100000}};
  EXPECT_THAT(error_of(v3), HasSubstr("'n_shared_experts'"));
}

// Text from the file reaches the terminal escaped: an escape sequence in model_type would
// retitle and clear it, a NUL would cut the message short.
TEST(ModelConfig, ControlCharactersInValuesAreEscapedInMessages) {
  json j = gpt_oss_20b();
  j["model_type"] = std::string("gpt\x1b]0;pwned\x07\x1b[2J");
  std::string e = error_of(j);
  EXPECT_THAT(e, HasSubstr("\"gpt\\x1b]0;pwned\\x07\\x1b[2J\" is not supported"));
  EXPECT_EQ(e.find('\x1b'), std::string::npos) << e;
  j = gpt_oss_20b();
  j["model_type"] = std::string("gpt_oss\0junk", 12);
  e = error_of(j);
  EXPECT_THAT(e, HasSubstr("gpt_oss\\x00junk"));
}

}  // namespace
}  // namespace mxmoe
