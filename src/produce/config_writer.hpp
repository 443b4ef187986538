// LayerSpec -> the config.json a model family's checkpoint would carry: the inverse of
// parse_model_config, for checkpoints mxmoe writes (`mxmoe synth`). Only the fields that
// define the MoE layer are written, as the family's transformers config names them.
#pragma once

#include <string>

#include "mxmoe/layer_spec.hpp"

namespace mxmoe {

// DeepSeek-V4's hash-routed layers: the first hash_layers of the model (mlp_layer_types), with
// token ids in [0, vocab). A hash spec makes every layer a hash layer.
struct HashLayers {
  int hash_layers = 0;
  int vocab = 0;  // 0: the spec's (a hash spec), else required when hash_layers > 0
};

// Every one of NUM_LAYERS layers is a MoE layer with `spec`'s shape; the experts are MXFP4
// in the gpt-oss layout (quantization_config records the gate/up layout when it is not the
// family's own). A deepseek_v4 spec is written as the release's config: mlp_layer_types,
// scoring_func, swiglu_limit, and, for an FP8 shared expert, the release's DeepSeek-style FP8
// quantization_config with expert_dtype "fp4". Throws std::invalid_argument when the family's
// config cannot express the spec (e.g. a Mixtral layer with expert biases); the caller checks
// the round trip.
std::string model_config_json(const LayerSpec& spec, int num_layers, const HashLayers& hash = {});

}  // namespace mxmoe
