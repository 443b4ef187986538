// BF16/F32 per-expert checkpoints (Mixtral, Qwen3-MoE, DeepSeek naming) -> an MXFP4
// checkpoint in the gpt-oss layout that Checkpoint::open loads back (`mxmoe quantize`).
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "mxmoe/format.hpp"

namespace mxmoe::produce {

// The most bytes a file of IN other than its weights may have (tokenizer.json of a 200 k
// vocabulary is ~30 MB): anything larger is refused, naming it.
inline constexpr std::uint64_t kMaxExtraFileBytes = std::uint64_t{256} << 20;

struct QuantizeOptions {
  ScaleRule scale_rule = ScaleRule::round_up;
  bool force = false;  // replace an existing OUT directory whole
  // One line per shard (per layer), per GB of IN read, and for the other files; may be empty.
  std::function<void(const std::string&)> progress;
  // Polled between experts and between pieces of every tensor copied; true stops the conversion
  // (QuantizeCancelled) with OUT as it was. The CLI sets it from SIGINT/SIGTERM.
  std::function<bool()> cancelled;
};

class QuantizeCancelled : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads IN (config.json + safetensors), writes OUT, a complete model: one shard per layer
// holding its MoE tensors (the router, dtype kept; the MXFP4 experts, gate/up as halves; the
// selection bias and the fused shared expert where the family has them; DeepSeek-V4 in its
// own naming) and every other tensor of the layer copied unchanged (attention, norms, a dense
// MLP, the router and shared experts under their own names too), then the tensors outside the
// layers (embeddings, final norm, head) in shards of at most 4 GB, an index of every tensor,
// every other file of IN (tokenizer, generation config, ...) copied, and a config.json that is
// IN's with quantization_config set to quant_method mxfp4, the gate/up layout and the scale
// rule. The BF16/F32 routed experts are the only tensors of IN not in OUT. Streaming: a copy
// goes from IN's mapping to OUT in pieces, a layer is quantized at a time.
//
// Transactional: everything is written into a temporary sibling directory (.OUT.mxmoe-tmp-*)
// that is flushed to disk and renamed into place only when complete; with force, an existing
// OUT is swapped out whole (renameat2 RENAME_EXCHANGE) and then deleted, so no file of the old
// output survives beside the new one. A failure or cancellation deletes the temporary
// directory and leaves OUT exactly as it was (or absent). Throws LoadError (bad input, NaN/Inf
// in a weight, OUT exists without force), files::FileError (I/O), QuantizeCancelled.
void quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                         const QuantizeOptions& options);

}  // namespace mxmoe::produce
