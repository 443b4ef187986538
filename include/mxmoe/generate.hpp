// Random MXFP4 checkpoints with a preset's shape: what `mxmoe generate` and the Python
// package's mxmoe.generate() write, to try the library without downloading a model.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "mxmoe/export.h"
#include "mxmoe/layer_spec.hpp"

namespace mxmoe {

struct MXMOE_API GenerateOptions {
  // MoE layers; 0: one, or with `full` the published model's (24 for gpt-oss-20b, 36 for
  // gpt-oss-120b, 48 for Qwen3-30B-A3B).
  int layers = 0;
  // DeepSeek-V4 only: the first hash_layers layers are hash-routed (a random tid2eid table of
  // `vocab` token ids; 0: 129280, V4's vocabulary), the rest routed by the spec.
  int hash_layers = 0;
  // The vocabulary: DeepSeek-V4's hash layers' token ids, or with `full` the rows of the
  // embedding and the head (0: the published model's; at least 256 bytes + special tokens).
  int vocab = 0;
  std::uint64_t seed = 1;  // layer N's weights come from seed + N (with full: tensor T's)
  bool force = false;      // replace an existing OUT as a whole
  // The whole model, every tensor of the published checkpoint with its name, shape and dtype
  // (attention, norms, embeddings, head), a byte-level tokenizer.json, tokenizer_config.json
  // and generation_config.json, so that transformers loads it: gpt-oss presets (gpt-oss-20b,
  // gpt-oss-120b, tiny) with MXFP4 experts as published, qwen3-30b-a3b with BF16 per-expert
  // weights as published (convert them with `mxmoe quantize`).
  bool full = false;
  int attention_heads = 0, kv_heads = 0, head_dim = 0;  // with full; 0: the published model's
  std::uint64_t max_shard_bytes = 0;                    // with full; 0: 4 GB per shard
  std::function<void(const std::string&)> progress;     // one line per shard, and per GB
  // Polled between layers and between pieces of every tensor: true stops the writing
  // (GenerateCancelled) with OUT as it was. The CLI sets it from SIGINT/SIGTERM.
  std::function<bool()> cancelled;
};

class MXMOE_API GenerateCancelled : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes a checkpoint of options.layers MoE layers with SPEC's shape and random weights (every
// E2M1 code, E8M0 scales sized for unit-variance outputs): config.json of SPEC's family and
// the gpt-oss MXFP4 layout (DeepSeek-V4's release naming for a deepseek_v4 SPEC), one safetensors
// file per layer (a sharded index above one); with options.full, the whole model (above) in
// shards of at most max_shard_bytes with an index. It is written into a temporary sibling
// directory, in pieces (bounded memory), and renamed into place when complete, so OUT is either
// the whole checkpoint or untouched. Throws LoadError (I/O, OUT exists without force),
// std::invalid_argument (SPEC not expressible as a config.json, a size out of range, naming it),
// GenerateCancelled.
MXMOE_API void generate_checkpoint(const std::string& out, const LayerSpec& spec,
                                   const GenerateOptions& options = {});

// The bytes of the tensors generate_checkpoint writes with these options (the index's
// total_size), computed without writing anything. Throws as generate_checkpoint for bad options.
MXMOE_API std::uint64_t generated_tensor_bytes(const LayerSpec& spec,
                                               const GenerateOptions& options = {});

}  // namespace mxmoe
