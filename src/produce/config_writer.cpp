#include "produce/config_writer.hpp"

#include <stdexcept>

#include "base/json.hpp"

namespace mxmoe {
namespace {

using json::Json;

void require(bool ok, const LayerSpec& s, const char* what) {
  if (!ok)
    throw std::invalid_argument("a " + std::string(to_string(s.family)) +
                                " config cannot express this layer: " + what);
}

// DeepSeek-V4's own keys (docs/CHECKPOINTS.md): the scoring function (of the routed layers'
// method, or a hash spec's score function), the clamp (0 = none), which layers are hash
// layers, and the release's quantization_config for an FP8 shared expert.
void write_deepseek_v4(const LayerSpec& s, int num_layers, const HashLayers& hash, Json& c,
                       Json& q) {
  const bool all_hash = s.routing == RoutingMethod::hash;
  std::string scoring;
  if (all_hash) {
    scoring = std::string(to_string(s.routing_params.score_function));
  } else if (s.routing == RoutingMethod::sqrtsoftplus_topk) {
    scoring = "sqrtsoftplus";
  } else if (s.routing == RoutingMethod::sigmoid_group_topk && s.routing_params.n_group == 1) {
    scoring = "sigmoid";
  } else if (s.routing == RoutingMethod::softmax_topk && s.routing_params.selection_bias) {
    scoring = "softmax";
  }
  require(!scoring.empty(), s, "routing other than DeepSeek-V4's");
  require(s.activation == ActivationFn::silu_glu_clamp || s.activation == ActivationFn::silu_glu, s,
          "an activation other than DeepSeek-V4's");
  require(s.gate_up_layout == GateUpLayout::halves, s, "interleaved gate/up rows");
  c["scoring_func"] = scoring;
  c["swiglu_limit"] =
      s.activation == ActivationFn::silu_glu_clamp ? s.activation_params.limit : 0.0f;
  const int hash_layers = all_hash ? num_layers : hash.hash_layers;
  require(hash_layers >= 0 && hash_layers <= num_layers, s, "more hash layers than layers");
  Json types = Json::array();
  for (int i = 0; i < num_layers; ++i) types.push_back(i < hash_layers ? "hash_moe" : "moe");
  c["mlp_layer_types"] = types;
  const int vocab = all_hash ? s.vocab : hash.vocab;
  require(hash_layers == 0 || vocab >= 1, s, "hash layers without a vocabulary size");
  if (hash_layers > 0) c["vocab_size"] = vocab;
  require(s.shared_experts == 0 || s.shared_weight_format == ElementType::mxfp4 ||
              s.shared_weight_format == ElementType::fp8_e4m3,
          s, "a bf16/f32 shared expert (not in DeepSeek-V4's release config)");
  if (s.shared_experts > 0 && s.shared_weight_format == ElementType::fp8_e4m3) {
    q = {{"quant_method", "fp8"},
         {"fmt", "e4m3"},
         {"activation_scheme", "dynamic"},
         {"weight_block_size", {128, 128}},
         {"scale_fmt", "ue8m0"}};
    c["expert_dtype"] = "fp4";
  }
}

}  // namespace

std::string model_config_json(const LayerSpec& s, int num_layers, const HashLayers& hash) {
  validate(s);
  if (num_layers < 1) throw std::invalid_argument("model_config_json: num_layers < 1");
  Json c = Json::object();
  Json q = {{"quant_method", "mxfp4"}};
  const bool native_interleaved = s.family == Family::gpt_oss;
  if ((s.gate_up_layout == GateUpLayout::interleaved) != native_interleaved)
    q["mxmoe_gate_up_layout"] = std::string(to_string(s.gate_up_layout));
  const bool deepseek = s.family == Family::deepseek_v3 || s.family == Family::deepseek_v4;
  require(s.expert_bias == (s.family == Family::gpt_oss), s, "expert biases");
  require(s.router_bias == (s.family == Family::gpt_oss), s, "a router bias");
  require(s.routing_params.selection_bias == (deepseek && s.routing != RoutingMethod::hash), s,
          "a selection bias");
  require(s.family == Family::deepseek_v4 ||
              (s.shared_weight_format == ElementType::mxfp4 && hash.hash_layers == 0),
          s, "a non-MXFP4 shared expert or hash layers");
  require(deepseek || s.shared_experts == 0, s, "shared experts");
  require(!deepseek || s.shared_intermediate == s.shared_experts * s.intermediate, s,
          "a shared expert width other than n_shared_experts x moe_intermediate_size");

  switch (s.family) {
    case Family::gpt_oss:
      require(s.routing == RoutingMethod::topk_softmax && s.activation == ActivationFn::swiglu_oai,
              s, "routing or activation other than gpt-oss's");
      c = {{"architectures", {"GptOssForCausalLM"}},
           {"model_type", "gpt_oss"},
           {"num_local_experts", s.num_experts},
           {"num_experts_per_tok", s.top_k},
           {"experts_per_token", s.top_k},
           {"hidden_size", s.hidden},
           {"intermediate_size", s.intermediate},
           {"swiglu_limit", s.activation_params.limit},
           {"hidden_act", "silu"}};
      break;
    case Family::mixtral:
    case Family::qwen3_moe:
      require(s.routing == RoutingMethod::softmax_topk && s.activation == ActivationFn::silu_glu, s,
              "routing or activation other than softmax top-k with silu");
      if (s.family == Family::mixtral) {
        require(s.routing_params.renormalize, s, "routing without renormalisation");
        c = {{"architectures", {"MixtralForCausalLM"}},
             {"model_type", "mixtral"},
             {"num_local_experts", s.num_experts},
             {"num_experts_per_tok", s.top_k},
             {"hidden_size", s.hidden},
             {"intermediate_size", s.intermediate},
             {"hidden_act", "silu"}};
      } else {
        c = {{"architectures", {"Qwen3MoeForCausalLM"}},
             {"model_type", "qwen3_moe"},
             {"num_experts", s.num_experts},
             {"num_experts_per_tok", s.top_k},
             {"hidden_size", s.hidden},
             {"moe_intermediate_size", s.intermediate},
             {"norm_topk_prob", s.routing_params.renormalize},
             {"decoder_sparse_step", 1},
             {"mlp_only_layers", Json::array()},
             {"hidden_act", "silu"}};
      }
      break;
    case Family::deepseek_v3:
    case Family::deepseek_v4: {
      const bool v4 = s.family == Family::deepseek_v4;
      c = {{"architectures", {v4 ? "DeepseekV4ForCausalLM" : "DeepseekV3ForCausalLM"}},
           {"model_type", v4 ? "deepseek_v4" : "deepseek_v3"},
           {"n_routed_experts", s.num_experts},
           {"num_experts_per_tok", s.top_k},
           {"hidden_size", s.hidden},
           {"moe_intermediate_size", s.intermediate},
           {"n_shared_experts", s.shared_experts},
           {"routed_scaling_factor", s.routing_params.routed_scaling_factor},
           {"norm_topk_prob", s.routing_params.renormalize},
           {"first_k_dense_replace", 0},
           {"moe_layer_freq", 1},
           {"hidden_act", "silu"}};
      if (v4) {
        write_deepseek_v4(s, num_layers, hash, c, q);
      } else {
        require(s.routing_params.renormalize, s, "routing without renormalisation");
        require(s.routing == RoutingMethod::sigmoid_group_topk &&
                    s.activation == ActivationFn::silu_glu,
                s, "routing or activation other than DeepSeek-V3's");
        c["scoring_func"] = "sigmoid";
        c["topk_method"] = "noaux_tc";
        c["n_group"] = s.routing_params.n_group;
        c["topk_group"] = s.routing_params.topk_group;
      }
      break;
    }
  }
  c["num_hidden_layers"] = num_layers;
  c["torch_dtype"] = "bfloat16";
  c["quantization_config"] = q;
  return c.dump(2) + "\n";
}

}  // namespace mxmoe
