// config.json -> the whole decoder's shape: what a model runtime needs beyond the MoE layer
// (model/model_config.hpp reads that): attention sizes, RoPE, sliding windows, norms, the
// dense MLP layers, the vocabulary, the head, the stop tokens.
//
// Families: gpt_oss, qwen3_moe, mixtral. DeepSeek-V3/V4 (multi-head latent attention and
// their own attention) are refused naming what is missing; their MoE layers still run through
// the layer API. Every field read is checked for type and range, naming it; a value mxmoe
// cannot honour (an unknown rope_type, an attention variant) is an error naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mxmoe::llm {

enum class DecoderFamily : std::uint8_t { gpt_oss, qwen3_moe, mixtral };
std::string_view to_string(DecoderFamily) noexcept;

// RoPE over pairs (i, i + rotary_dim / 2) of each head, angle position * inv_freq[i],
// cos and sin scaled by attention_factor (YaRN's mscale; 1 otherwise).
struct RopeConfig {
  std::string type = "default";  // "default" | "yarn"
  double theta = 10000.0;
  // yarn
  double factor = 1.0, beta_fast = 32.0, beta_slow = 1.0;
  double original_max_positions = 0;  // original_max_position_embeddings
  bool truncate = true;
  double attention_factor = 0;  // 0: from factor (0.1 ln(factor) + 1)
};

struct DecoderConfig {
  DecoderFamily family = DecoderFamily::gpt_oss;
  std::string model_type;
  int layers = 0, hidden = 0, vocab = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  int max_positions = 0;  // max_position_embeddings
  double rms_eps = 1e-6;
  bool attention_bias = false;  // q/k/v/o biases (gpt-oss)
  bool qk_norm = false;         // per-head RMSNorm of q and k before RoPE (Qwen3)
  bool sinks = false;           // a learned logit per head in the softmax (gpt-oss)
  bool tie_word_embeddings = false;
  RopeConfig rope;
  // Per layer: the sliding window (0 for full attention) and whether the MLP is the MoE block
  // (false: a dense SiLU-gated MLP of dense_intermediate, Qwen3's mlp_only_layers).
  std::vector<int> window;
  std::vector<bool> moe;
  int dense_intermediate = 0;
  // Token ids that end a sequence: eos_token_id of config.json and generation_config.json.
  std::vector<std::int32_t> eos_ids;
  std::int32_t bos_id = -1;  // -1: none
};

// Parses config.json (LABEL names it in errors; LoadError naming the field). The DeepSeek
// families and unknown model types are refused with the reason.
DecoderConfig parse_decoder_config(std::string_view config_json, const std::string& label);
// Adds generation_config.json's eos_token_id (an int or a list) to config.eos_ids.
void add_generation_config(DecoderConfig& config, std::string_view generation_json,
                           const std::string& label);

}  // namespace mxmoe::llm
