// BF16/F32 per-expert checkpoints (Mixtral, Qwen3-MoE, DeepSeek naming) -> an MXFP4
// checkpoint in the gpt-oss layout that Checkpoint::open loads back (`mxmoe quantize`).
#pragma once

#include <functional>
#include <string>

#include "mxmoe/format.hpp"

namespace mxmoe::io {

struct QuantizeOptions {
  ScaleRule scale_rule = ScaleRule::round_up;
  bool force = false;                                // write into an existing OUT directory
  std::function<void(const std::string&)> progress;  // one line per layer, may be empty
};

// Reads IN (config.json + safetensors), writes OUT: one shard per MoE layer holding the
// router (dtype kept), the MXFP4 experts (gate/up as halves), the selection bias and the
// fused shared expert where the family has them, an index, and a config.json whose
// quantization_config records quant_method mxfp4, the gate/up layout and the scale rule.
// Only the MoE tensors are written. Throws LoadError (bad input, NaN/Inf in a weight, OUT
// exists without force).
void quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                         const QuantizeOptions& options);

}  // namespace mxmoe::io
