// LayerSpec -> the config.json a model family's checkpoint would carry: the inverse of
// parse_model_config, for checkpoints mxmoe writes (`mxmoe generate`). Only the fields that
// define the MoE layer are written, as the family's transformers config names them.
#pragma once

#include <string>

#include "mxmoe/layer_spec.hpp"

namespace mxmoe {

// Every one of NUM_LAYERS layers is a MoE layer with `spec`'s shape; the experts are MXFP4
// in the gpt-oss layout (quantization_config records the gate/up layout when it is not the
// family's own). Throws std::invalid_argument when the family's config cannot express the
// spec (e.g. a Mixtral layer with expert biases); the caller checks the round trip.
std::string model_config_json(const LayerSpec& spec, int num_layers);

}  // namespace mxmoe
