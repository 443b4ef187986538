// The whole of a published model around its MoE layers, as `mxmoe synth --full` writes it:
// every tensor of the published checkpoint (names, shapes, dtypes) with how its random values are
// drawn, its config.json, generation_config.json and a small working tokenizer. gpt-oss (20b,
// 120b and their resized variants) as published, MXFP4 experts; Qwen3-MoE (Qwen3-30B-A3B) as
// published, BF16 per-expert matrices (the input of `mxmoe quantize`). Names and shapes follow
// transformers 5.24 (models/gpt_oss, models/qwen3_moe and its conversion mapping's per-expert
// names); docs/CHECKPOINTS.md lists them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "mxmoe/layer_spec.hpp"

namespace mxmoe {

// The sizes of the non-MoE part; 0 takes the published model's.
struct FullModelSizes {
  int layers = 0, vocab = 0, attention_heads = 0, kv_heads = 0, head_dim = 0;
};

// How a tensor's values are drawn.
enum class TensorFill : std::uint8_t {
  uniform,  // BF16 uniform in [-amplitude, amplitude): sqrt(3 / fan_in) gives variance 1/fan_in
  ones,     // BF16 1.0 (the RMSNorm weights)
  random_bytes,  // U8, every byte (every pair of E2M1 codes) equally likely
  mxfp4_scales,  // U8 E8M0 scales of rows of `cols` columns (model/random_weights.hpp)
};

struct FullModelTensor {
  std::string name;
  StDtype dtype = StDtype::BF16;
  std::vector<std::uint64_t> shape;
  TensorFill fill = TensorFill::uniform;
  float amplitude = 0;    // uniform
  std::int64_t cols = 0;  // mxfp4_scales
  std::uint64_t bytes() const;
};

struct FullModel {
  FullModelSizes sizes;                  // resolved: no 0 left
  std::vector<FullModelTensor> tensors;  // in checkpoint order: embeddings, layer by layer, head
  std::string config_json, generation_config_json, tokenizer_json, tokenizer_config_json;
  std::uint64_t bytes() const;  // of all tensors
};

// SPEC's whole model with SIZES. Throws std::invalid_argument for a family other than gpt_oss
// and qwen3_moe, or a size out of range (naming it).
FullModel full_model(const LayerSpec& spec, const FullModelSizes& sizes);

}  // namespace mxmoe
