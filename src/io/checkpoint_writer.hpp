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
// Layer N in DeepSeek-V4's release naming (io/deepseek_v4_layout.hpp, no "model." prefix):
// router BF16, selection bias F32 or tid2eid I64, experts I8 + F8_E8M0 per expert and
// projection (w1 gate, w3 up, w2 down), the shared expert in its format (FP8 E4M3 + F8_E8M0
// 128 x 128 block scales, or I8 + F8_E8M0).
LayerTensors deepseek_v4_layer_tensors(const LayerSpec& spec, const LayerWeights& w, int layer);

// generate_checkpoint and its options are public (mxmoe/generate.hpp); this room writes them.
using ::mxmoe::generate_checkpoint;
using ::mxmoe::GenerateOptions;

}  // namespace mxmoe::io
