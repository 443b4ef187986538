// BF16/F32 per-expert checkpoints (Mixtral, Qwen3-MoE, DeepSeek naming) -> an MXFP4
// checkpoint in the gpt-oss layout that Checkpoint::open loads back (`mxmoe quantize`).
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

#include "mxmoe/format.hpp"

namespace mxmoe::io {

struct QuantizeOptions {
  ScaleRule scale_rule = ScaleRule::round_up;
  bool force = false;                                // replace an existing OUT directory whole
  std::function<void(const std::string&)> progress;  // one line per layer, may be empty
  // Polled between experts; true stops the conversion (QuantizeCancelled) with OUT as it
  // was. The CLI sets it from SIGINT/SIGTERM.
  std::function<bool()> cancelled;
};

class QuantizeCancelled : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads IN (config.json + safetensors), writes OUT: one shard per MoE layer holding the
// router (dtype kept), the MXFP4 experts (gate/up as halves), the selection bias and the
// fused shared expert where the family has them, an index, and a config.json whose
// quantization_config records quant_method mxfp4, the gate/up layout and the scale rule.
// Only the MoE tensors are written.
//
// Transactional: everything is written into a temporary sibling directory (.OUT.mxmoe-tmp-*)
// that is flushed to disk and renamed into place only when complete; with force, an existing
// OUT is swapped out whole (renameat2 RENAME_EXCHANGE) and then deleted, so no file of the old
// output survives beside the new one. A failure or cancellation deletes the temporary
// directory and leaves OUT exactly as it was (or absent). Throws LoadError (bad input, NaN/Inf
// in a weight, OUT exists without force), files::FileError (I/O), QuantizeCancelled.
void quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                         const QuantizeOptions& options);

}  // namespace mxmoe::io
