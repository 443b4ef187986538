// The real shapes of the supported models' MoE layers (sources in docs/MODELS.md).
#include <array>
#include <stdexcept>
#include <string>

#include "mxmoe/layer_spec.hpp"

namespace mxmoe {
namespace {

struct PresetRow {
  const char* name;
  Family family;
  LayerResize shape;  // E, top-k, H, I
  LayerSpec math;     // the routing and expert math, LayerSpec's fields but name and shape
};

// The presets, one row each, in the order preset_names() lists them.
std::array<PresetRow, 8> preset_rows() {
  const LayerSpec gpt_oss{.name = {},
                          .routing = RoutingMethod::topk_softmax,
                          .routing_params = {},
                          .activation = ActivationFn::swiglu_oai,
                          .activation_params = {.alpha = 1.702f, .limit = 7.0f},
                          .expert_bias = true,
                          .router_bias = true,
                          .gate_up_layout = GateUpLayout::interleaved};
  // Mixtral always renormalises; Qwen3-30B-A3B has norm_topk_prob=true.
  const LayerSpec softmax_topk{.name = {},
                               .routing = RoutingMethod::softmax_topk,
                               .routing_params = {.renormalize = true},
                               .activation = ActivationFn::silu_glu,
                               .activation_params = {},
                               .gate_up_layout = GateUpLayout::halves};
  // DeepSeek's shared expert is as wide as a routed one (resize() sets shared_intermediate).
  const LayerSpec deepseek_v3{.name = {},
                              .routing = RoutingMethod::sigmoid_group_topk,
                              .routing_params = {.renormalize = true,
                                                 .selection_bias = true,
                                                 .n_group = 8,
                                                 .topk_group = 4,
                                                 .routed_scaling_factor = 2.5f},
                              .activation = ActivationFn::silu_glu,
                              .activation_params = {},
                              .gate_up_layout = GateUpLayout::halves,
                              .shared_experts = 1};
  // DeepSeek-V4: V3's math with sqrt(softplus) scores in one group, clamped silu, and the
  // shared expert stored (by the release) in FP8 E4M3 with 128 x 128 E8M0 block scales.
  LayerSpec deepseek_v4 = deepseek_v3;
  deepseek_v4.routing = RoutingMethod::sqrtsoftplus_topk;
  deepseek_v4.routing_params.n_group = 1;
  deepseek_v4.routing_params.topk_group = 1;
  deepseek_v4.routing_params.routed_scaling_factor = 1.5f;
  deepseek_v4.activation = ActivationFn::silu_glu_clamp;
  deepseek_v4.activation_params.limit = 10.0f;
  deepseek_v4.shared_weight_format = ElementType::fp8_e4m3;
  // The first num_hash_layers (3) layers of V4-Flash: experts by token id (tid2eid), weights
  // from the same sqrt(softplus) scores, no selection bias.
  LayerSpec deepseek_v4_hash = deepseek_v4;
  deepseek_v4_hash.routing = RoutingMethod::hash;
  deepseek_v4_hash.routing_params.selection_bias = false;
  deepseek_v4_hash.routing_params.score_function = ScoreFunction::sqrtsoftplus;
  deepseek_v4_hash.vocab = 129280;
  // "tiny" is for quick tries: the gpt-oss math (biases, clamped swiglu) at E=8, top-2, H=I=256.
  return {{
      {"gpt-oss-20b", Family::gpt_oss, {32, 4, 2880, 2880}, gpt_oss},
      {"gpt-oss-120b", Family::gpt_oss, {128, 4, 2880, 2880}, gpt_oss},
      {"deepseek-v4-flash", Family::deepseek_v4, {256, 6, 4096, 2048}, deepseek_v4},
      {"deepseek-v4-flash-hash", Family::deepseek_v4, {256, 6, 4096, 2048}, deepseek_v4_hash},
      {"deepseek-v3", Family::deepseek_v3, {256, 8, 7168, 2048}, deepseek_v3},
      {"qwen3-30b-a3b", Family::qwen3_moe, {128, 8, 2048, 768}, softmax_topk},
      {"mixtral-8x7b", Family::mixtral, {8, 2, 4096, 14336}, softmax_topk},
      {"tiny", Family::gpt_oss, {8, 2, 256, 256}, gpt_oss},
  }};
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const PresetRow& row : preset_rows()) names.emplace_back(row.name);
  return names;
}

LayerSpec preset(std::string_view name) {
  std::string valid;
  for (const PresetRow& row : preset_rows()) {
    if (name == row.name) {
      LayerSpec s = row.math;
      s.name = row.name;
      s.family = row.family;
      return resize(std::move(s), row.shape);
    }
    valid += std::string(valid.empty() ? "" : ", ") + row.name;
  }
  throw std::invalid_argument("unknown preset '" + std::string(name) + "'; valid: " + valid);
}

}  // namespace mxmoe
