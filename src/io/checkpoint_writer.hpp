// Writing MXFP4 checkpoints in the gpt-oss layout (gpt_oss_layout.hpp), which every mxmoe
// reader binds: one layer's tensors from LayerWeights, and whole generated checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mxmoe/layer_spec.hpp"
#include "mxmoe/safetensors.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::io {

// Layer N's tensors (names of gpt_oss_layout.hpp), with their bytes owned here.
struct LayerTensors {
  std::vector<std::vector<std::uint8_t>> bytes;
  std::vector<TensorToWrite> tensors;  // views of `bytes`
};
LayerTensors gpt_oss_layer_tensors(const LayerSpec& spec, const LayerWeights& w, int layer);

struct GenerateOptions {
  int layers = 1;
  std::uint64_t seed = 1;  // layer N's weights: LayerStorage::random(spec, seed + N)
  bool force = false;      // replace an existing OUT as a whole
  std::function<void(const std::string&)> progress;  // one line per layer; may be empty
};

// Writes a checkpoint of LAYERS MoE layers with SPEC's shape and random weights: config.json
// (model_config_json) and model.safetensors. It is written into a temporary sibling
// directory and renamed into place when complete, so OUT is either the whole checkpoint or
// untouched. Checks that the written config reads back as SPEC. Throws LoadError (I/O,
// OUT exists without force) or std::invalid_argument (SPEC not expressible as a config).
void generate_checkpoint(const std::string& out, const LayerSpec& spec,
                         const GenerateOptions& options);

}  // namespace mxmoe::io
