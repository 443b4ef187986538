// config.json -> the MoE LayerSpec of a model (gpt_oss, mixtral, qwen3_moe, deepseek_v3,
// deepseek_v4). Policy (docs/CHECKPOINTS.md): only the fields that define the MoE layer are
// read; each is checked for type and range, and one whose value mxmoe cannot honour (an
// unsupported hidden_act, quant_method, scoring_func, ...) is an error naming the field.
// Every other key (torch_dtype, rope_scaling, attention sizes, ...) is ignored.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/layer_spec.hpp"

namespace mxmoe {

// The most layers a config.json may declare (num_hidden_layers): far above any real model
// (DeepSeek-V3 has 61), low enough that per-layer bookkeeping stays small.
inline constexpr int kMaxModelLayers = 16384;

struct ModelConfig {
  std::string model_type;    // as written (text_config's when nested)
  std::string architecture;  // architectures[0], or ""
  LayerSpec moe;             // the spec every (routed) MoE layer of the model shares
  // DeepSeek-V4: the spec of its hash-routed layers (moe with RoutingMethod::hash), and which
  // layers those are (mlp_layer_types "hash_moe", or the first num_hash_layers).
  LayerSpec hash_moe;
  std::vector<bool> hash_layer;  // per layer
  int num_layers = 0;
  // Layers a checkpoint may hold past num_layers that no MoE layer is read from: DeepSeek's
  // multi-token-prediction layers (num_nextn_predict_layers, 1 when absent); 0 otherwise.
  int mtp_layers = 0;
  std::vector<std::string> non_moe_reason;  // per layer: "" for a MoE layer, else why not
  std::string quant_method;                 // quantization_config.quant_method, "" when absent
  bool gate_up_layout_recorded = false;     // quantization_config.mxmoe_gate_up_layout given

  // The spec of MoE layer `layer` (hash_moe for a hash layer, else moe); no range check.
  const LayerSpec& spec_of(int layer) const {
    return hash_layer[static_cast<std::size_t>(layer)] ? hash_moe : moe;
  }
};

// Throws LoadError "LABEL: field 'path.to.field': ..." naming the field.
ModelConfig parse_model_config(std::string_view json_text, const std::string& label,
                               const std::string& model_name);

}  // namespace mxmoe
