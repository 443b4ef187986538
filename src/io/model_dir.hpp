// A checkpoint directory opened: config.json parsed and the safetensors mapped. Shared by
// Checkpoint and `mxmoe info --model` (which describes every layer without scanning values).
#pragma once

#include <string>
#include <string_view>

#include "io/tensor_set.hpp"
#include "model/model_config.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::io {

struct ModelDir {
  // Tensor naming: mxmoe's gpt-oss Hugging Face layout, or DeepSeek-V4's own
  // (io/deepseek_v4_layout.hpp) under v4_root ("" for the release, "model." for
  // transformers' save_pretrained).
  enum class Layout { gpt_oss, deepseek_v4 };

  std::string dir;
  std::string config_text;  // config.json as read
  ModelConfig config;
  TensorSet tensors;
  Layout layout = Layout::gpt_oss;
  std::string v4_root;

  // Throws LoadError; says to run `mxmoe quantize` when the experts are not MXFP4.
  static ModelDir open(const std::string& dir);
  // LoadError unless LAYER is in range and a MoE layer.
  const LayerSpec& moe_spec(int layer) const;
  // Views of LAYER (see bind_gpt_oss_layer); errors are prefixed with the layer.
  LayerWeights bind(int layer, bool check_values,
                    const std::vector<ExpertRange>* scale_experts = nullptr) const;
};

// N of the first "layers.N." in NAME (at its start or after a '.'), or -1 (embeddings, the
// final norm, the head, DeepSeek-V4's mtp.*).
int layer_of(std::string_view name);

// LoadError unless every tensor of SET named for a decoder layer ("model.layers.N." or
// "layers.N.", DeepSeek-V4's release) is of one of CONFIG's layers or DeepSeek's MTP layers
// after them: a config.json declaring fewer layers than the checkpoint holds would otherwise
// leave the rest unread. Names the tensor, the config value and how many tensors lie beyond.
void require_tensors_within_layers(const TensorSet& set, const ModelConfig& config,
                                   const std::string& dir);

}  // namespace mxmoe::io
