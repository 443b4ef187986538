// Writing MXFP4 checkpoints in the gpt-oss layout (io/gpt_oss_layout.hpp), which every mxmoe
// reader binds: one layer's tensors from LayerWeights, and whole generated checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/file.hpp"
#include "base/json.hpp"
#include "io/safetensors.hpp"
#include "io/safetensors_stream.hpp"
#include "mxmoe/generate.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::produce {

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

// Where a tensor's bytes come from: `fill` is called once and hands the bytes out in order,
// in pieces of at most kWritePieceBytes (through `emit`), so that no tensor has to be in memory
// whole (a copy from a mapping, a generator writing into one buffer).
inline constexpr std::size_t kWritePieceBytes = std::size_t{32} << 20;
using ByteSink = std::function<void(std::span<const std::uint8_t>)>;
struct PlannedTensor {
  io::TensorHeader header;
  std::function<void(const ByteSink& emit)> fill;
};
// A tensor whose bytes are DATA (in memory or mapped), handed out in pieces; after each piece,
// `after_piece` (when set) is called with the piece (to count it, or to release its pages).
PlannedTensor planned_copy(io::TensorHeader header, std::span<const std::uint8_t> data,
                           std::function<void(std::span<const std::uint8_t>)> after_piece = {});

// Groups tensors of SIZES, in order, into consecutive shards of at most MAX_BYTES each (a tensor
// larger than that is a shard of its own): the index of each shard's first tensor.
std::vector<std::size_t> pack_shards(std::span<const std::uint64_t> sizes, std::uint64_t max_bytes);
// "model-00001-of-00004.safetensors" (index from 1).
std::string shard_file_name(std::size_t index, std::size_t count);

// Bytes done of a total as progress lines, "LABEL: 1.23/13.80 GB (9%)": add() emits one each
// time another STEP bytes have passed (long copies and generators report as they go).
class ProgressMeter {
 public:
  ProgressMeter(std::string label, std::uint64_t total,
                std::function<void(const std::string&)> progress,
                std::uint64_t step = std::uint64_t{1} << 30);
  void add(std::uint64_t bytes);
  std::string fraction() const;  // "1.23/13.80 GB (9%)"
  std::uint64_t done() const noexcept { return done_; }

 private:
  std::string label_;
  std::uint64_t total_, step_, done_ = 0, next_;
  std::function<void(const std::string&)> progress_;
};

// The file every checkpoint directory mxmoe writes holds: what --force may replace (besides an
// empty directory), so that it never deletes a directory of someone else's.
inline constexpr const char* kCheckpointMarker = ".mxmoe-checkpoint";

// A checkpoint directory written whole or not at all, for every writer of checkpoints
// (generate, quantize): shards go into a temporary sibling directory (files::AtomicDirectory),
// finish() adds the index and config.json and renames the directory into place. An existing
// OUT is refused unless `force`, and then replaced as a whole (no old shard survives beside
// new ones); a failure or a cancellation before finish() leaves OUT as it was.
class CheckpointDirectoryWriter {
 public:
  // Throws LoadError, before anything is written, when OUT exists and `force` is not set; when
  // OUT is a symbolic link (a loop of them too); and, with `force`, when OUT is not a
  // directory, is or contains the current directory, or is neither empty nor a checkpoint
  // mxmoe wrote (kCheckpointMarker), naming its first entries.
  CheckpointDirectoryWriter(const std::string& out, bool force);
  // Called between pieces of every tensor written (and before each file): it throws to cancel
  // (the exception leaves the writer, and the temporary directory is deleted with it).
  void set_poll(std::function<void()> poll) { poll_ = std::move(poll); }
  // Writes FILE (a plain file name) with TENSORS, streamed, and records them in the index. A
  // tensor name already written to another shard is std::invalid_argument.
  void add_shard(const std::string& file, std::span<const PlannedTensor> tensors);
  void add_shard(const std::string& file, const std::vector<TensorToWrite>& tensors);
  // Writes another file of the checkpoint (a tokenizer, a generation config) whole.
  void add_file(const std::string& file, std::string_view contents);
  // Writes config.json (and model.safetensors.index.json when `with_index`), then commits.
  void finish(const std::string& config_json, bool with_index);
  bool replaces_existing() const noexcept { return out_exists_; }
  bool holds(const std::string& tensor) const { return weight_map_.contains(tensor); }
  const std::string& staging_path() const noexcept { return staging_.path(); }

 private:
  void poll() const {
    if (poll_) poll_();
  }
  bool force_, out_exists_;
  files::AtomicDirectory staging_;
  std::function<void()> poll_;
  json::Json weight_map_ = json::Json::object();
  std::uint64_t total_ = 0;
};

// generate_checkpoint and its options are public (mxmoe/generate.hpp); this room writes them.
using ::mxmoe::generate_checkpoint;
using ::mxmoe::GenerateOptions;

}  // namespace mxmoe::produce
