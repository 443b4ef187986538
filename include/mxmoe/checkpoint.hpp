// Checkpoints: a model directory (config.json + one safetensors file or a sharded index)
// opened with mmap; layers are handed out as LayerWeights views into the mapping, never
// copied. Every malformed input is a LoadError naming the file, the tensor and the numbers.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxmoe/errors.hpp"
#include "mxmoe/export.h"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

class MXMOE_API Checkpoint {
 public:
  // Opens DIR: parses config.json into a LayerSpec template and maps the safetensors
  // file(s). Throws LoadError.
  static Checkpoint open(const std::string& dir);
  ~Checkpoint();
  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;

  int num_layers() const noexcept;
  // "" when layer N is a MoE layer mxmoe runs, else why not (a dense layer, ...). Throws
  // LoadError if N is out of range.
  std::string non_moe_reason(int layer) const;
  // The spec of layer N (throws LoadError if N is out of range or not a MoE layer).
  LayerSpec layer_spec(int layer) const;
  // The directory and its config.json text as read (validated JSON).
  const std::string& dir() const noexcept;
  const std::string& config_json() const noexcept;
  // Every safetensors header of the directory as text, a line per tensor in name order:
  // "NAME DTYPE [D0,D1,...] FILE BEGIN END" (FILE the file's name in the directory, BEGIN and
  // END its byte range in the file's data), then a line per file's metadata entry: "metadata
  // FILE KEY VALUE". What expert-parallel ranks compare, with config_json(), before they
  // combine (agree_on_checkpoint in mxmoe/expert_parallel.hpp).
  std::string tensor_table() const;
  // Views of layer N's tensors, validated against layer_spec(N); valid while *this lives.
  LayerWeights layer_weights(int layer) const;
  // The same, reading the values (NaN scales) of the routed experts in `experts` only: an
  // expert-parallel rank (Placement::runs of its rank) touches no page of the experts it
  // does not hold, so its resident memory is its share of the layer.
  LayerWeights layer_weights(int layer, const std::vector<ExpertRange>& experts) const;
  // Drops this process's resident pages of the routed experts' MXFP4 bytes of WEIGHTS (views
  // from layer_weights) where they lie in this checkpoint's mappings: for a layer whose
  // backend packed its own copy, so the checkpoint's bytes are not resident twice. Data-safe:
  // the pages stay mapped and read back from the files if touched again; bytes outside the
  // mappings are never touched.
  void release_expert_pages(const LayerWeights& weights) const noexcept;

 private:
  struct Impl;
  explicit Checkpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxmoe
