// Writing MXFP4 checkpoints in the gpt-oss layout (gpt_oss_layout.hpp), which every mxmoe
// reader binds: one layer's tensors from LayerWeights, and whole generated checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/file.hpp"
#include "base/json.hpp"
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

// A checkpoint directory written whole or not at all, for every writer of checkpoints
// (generate, quantize): shards go into a temporary sibling directory (files::AtomicDirectory),
// finish() adds the index and config.json and renames the directory into place. An existing
// OUT is refused unless `force`, and then replaced as a whole (no old shard survives beside
// new ones); a failure or a cancellation before finish() leaves OUT as it was.
class CheckpointDirectoryWriter {
 public:
  // Throws LoadError when OUT exists and `force` is not set, or exists and is not a directory.
  CheckpointDirectoryWriter(const std::string& out, bool force);
  // Writes FILE (a plain file name) with TENSORS and records them in the index.
  void add_shard(const std::string& file, const std::vector<TensorToWrite>& tensors);
  // Writes config.json (and model.safetensors.index.json when `with_index`), then commits.
  void finish(const std::string& config_json, bool with_index);
  bool replaces_existing() const noexcept { return out_exists_; }

 private:
  bool force_, out_exists_;
  files::AtomicDirectory staging_;
  json::Json weight_map_ = json::Json::object();
  std::uint64_t total_ = 0;
};

// generate_checkpoint and its options are public (mxmoe/generate.hpp); this room writes them.
using ::mxmoe::generate_checkpoint;
using ::mxmoe::GenerateOptions;

}  // namespace mxmoe::io
