// The real shapes of the supported models' MoE layers (sources in docs/MODELS.md).
#include <array>
#include <stdexcept>
#include <string>

#include "mxmoe/layer_spec.hpp"

namespace mxmoe {
namespace {

LayerSpec gpt_oss(std::string name, int experts) {
  LayerSpec s;
  s.name = std::move(name);
  s.family = Family::gpt_oss;
  s.num_experts = experts;
  s.top_k = 4;
  s.hidden = 2880;
  s.intermediate = 2880;
  s.routing = RoutingMethod::topk_softmax;
  s.activation = ActivationFn::swiglu_oai;
  s.activation_params = {.alpha = 1.702f, .limit = 7.0f};
  s.expert_bias = true;
  s.router_bias = true;
  s.gate_up_layout = GateUpLayout::interleaved;
  return s;
}

LayerSpec softmax_family(std::string name, Family family, int experts, int top_k, int hidden,
                         int intermediate) {
  LayerSpec s;
  s.name = std::move(name);
  s.family = family;
  s.num_experts = experts;
  s.top_k = top_k;
  s.hidden = hidden;
  s.intermediate = intermediate;
  s.routing = RoutingMethod::softmax_topk;
  s.routing_params.renormalize = true;  // Mixtral always; Qwen3-30B-A3B: norm_topk_prob=true
  s.activation = ActivationFn::silu_glu;
  s.gate_up_layout = GateUpLayout::halves;
  return s;
}

LayerSpec deepseek_v3() {
  LayerSpec s;
  s.name = "deepseek-v3";
  s.family = Family::deepseek_v3;
  s.num_experts = 256;
  s.top_k = 8;
  s.hidden = 7168;
  s.intermediate = 2048;
  s.routing = RoutingMethod::sigmoid_group_topk;
  s.routing_params = {.renormalize = true,
                      .selection_bias = true,
                      .n_group = 8,
                      .topk_group = 4,
                      .routed_scaling_factor = 2.5f};
  s.activation = ActivationFn::silu_glu;
  s.gate_up_layout = GateUpLayout::halves;
  s.shared_experts = 1;
  s.shared_intermediate = 2048;
  return s;
}

LayerSpec deepseek_v4_flash() {
  LayerSpec s;
  s.name = "deepseek-v4-flash";
  s.family = Family::deepseek_v4;
  s.num_experts = 256;
  s.top_k = 6;
  s.hidden = 4096;
  s.intermediate = 2048;
  s.routing = RoutingMethod::sqrtsoftplus_topk;
  s.routing_params = {.renormalize = true,
                      .selection_bias = true,
                      .n_group = 1,
                      .topk_group = 1,
                      .routed_scaling_factor = 1.5f};
  s.activation = ActivationFn::silu_glu_clamp;
  s.activation_params.limit = 10.0f;
  s.gate_up_layout = GateUpLayout::halves;
  s.shared_experts = 1;
  s.shared_intermediate = 2048;
  // The release stores the shared expert in FP8 E4M3 with 128 x 128 E8M0 block scales.
  s.shared_weight_format = ElementType::fp8_e4m3;
  return s;
}

// The first num_hash_layers (3) layers of V4-Flash: experts by token id (tid2eid), weights
// from the same sqrt(softplus) scores, no selection bias.
LayerSpec deepseek_v4_flash_hash() {
  LayerSpec s = deepseek_v4_flash();
  s.name = "deepseek-v4-flash-hash";
  s.routing = RoutingMethod::hash;
  s.routing_params.selection_bias = false;
  s.routing_params.score_function = ScoreFunction::sqrtsoftplus;
  s.vocab = 129280;
  return s;
}

constexpr std::array<const char*, 8> kPresetNames = {
    "gpt-oss-20b", "gpt-oss-120b",  "deepseek-v4-flash", "deepseek-v4-flash-hash",
    "deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b",      "tiny"};

}  // namespace

std::vector<std::string> preset_names() {
  return std::vector<std::string>(kPresetNames.begin(), kPresetNames.end());
}

LayerSpec preset(std::string_view name) {
  if (name == "gpt-oss-20b") return gpt_oss("gpt-oss-20b", 32);
  if (name == "gpt-oss-120b") return gpt_oss("gpt-oss-120b", 128);
  if (name == "deepseek-v4-flash") return deepseek_v4_flash();
  if (name == "deepseek-v4-flash-hash") return deepseek_v4_flash_hash();
  if (name == "deepseek-v3") return deepseek_v3();
  if (name == "qwen3-30b-a3b")
    return softmax_family("qwen3-30b-a3b", Family::qwen3_moe, 128, 8, 2048, 768);
  if (name == "mixtral-8x7b")
    return softmax_family("mixtral-8x7b", Family::mixtral, 8, 2, 4096, 14336);
  if (name == "tiny") {
    // For quick tries: the gpt-oss math (biases, clamped swiglu) at E=8, top-2, H=I=256.
    LayerSpec s = gpt_oss("tiny", 8);
    s.top_k = 2;
    s.hidden = 256;
    s.intermediate = 256;
    return s;
  }
  std::string valid;
  for (const char* n : kPresetNames) valid += std::string(valid.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown preset '" + std::string(name) + "'; valid: " + valid);
}

}  // namespace mxmoe
