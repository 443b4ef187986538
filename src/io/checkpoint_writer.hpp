// Writing MXFP4 checkpoints in the gpt-oss layout (gpt_oss_layout.hpp), which every mxmoe
// reader binds: one layer's tensors from LayerWeights, and whole generated checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mxmoe/generate.hpp"
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

// generate_checkpoint and its options are public (mxmoe/generate.hpp); this room writes them.
using ::mxmoe::generate_checkpoint;
using ::mxmoe::GenerateOptions;

}  // namespace mxmoe::io
