// The decoder of a whole model: the embeddings, each layer's attention, norms and MoE block
// (the runtime's MoeLayer, unchanged) or dense MLP, the final norm and the LM head, bound to a
// checkpoint's tensors in place (views on the mapping; only norms and sinks are copied, to
// float32).
//
// A step runs a list of rows, each a token of one sequence slot at the next position of that
// slot: a prompt's tokens (prefill), one token per sequence (decode), or a mix. Each row's
// bits depend only on its sequence (its tokens and cache), never on the other rows of the
// step, when the MoE layers are batch invariant (Request::batch_invariant).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "llm/decoder_config.hpp"
#include "mxmoe/deployment.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/llm.hpp"
#include "mxmoe/runtime.hpp"

namespace mxmoe::llm {

struct DecoderOptions {
  Request request;          // how the MoE layers are judged
  int max_context = 4096;   // positions per sequence slot
  int max_slots = 1;        // sequences at once
  int max_step_rows = 512;  // rows one step may carry (a prompt is prefilled in chunks of it)
  std::uint64_t memory_limit = 0;  // bytes the model may add (KV cache, packed experts); 0: no check
  // The non-expert matrices (attention, dense MLPs, the head) as published (bf16/f32 read in
  // place) or quantized at load to 8 or 4 bits per 32-block (backends/dense/dense_linear.hpp).
  CompactFormat compact = CompactFormat::off;
  std::function<void(const std::string&)> progress;  // loading progress lines
};

struct StepRow {
  std::int32_t token = 0;
  std::int32_t slot = 0;
  bool logits = false;  // write this row's logits
};

class Decoder {
 public:
  // Opens DIR (config.json, generation_config.json when present, the safetensors), checks
  // every tensor against the config (LoadError naming it), the memory (std::runtime_error
  // naming the bytes, before allocating), binds each MoE layer through the oracle
  // (NoBackendError) and allocates the KV cache.
  Decoder(const std::string& dir, const Hardware& hardware, Runtime& runtime,
          const DecoderOptions& options);
  ~Decoder();
  Decoder(Decoder&&) noexcept;
  Decoder& operator=(Decoder&&) noexcept;

  const DecoderConfig& config() const noexcept;
  const DecoderOptions& options() const noexcept;

  // Runs ROWS (at most max_step_rows): each row's token goes to its slot at position
  // length(slot), which then grows by one. Writes the logits of the rows marked `logits`, in
  // row order, to LOGITS ([count, vocab]). Throws std::invalid_argument before any work for a
  // token outside the vocabulary, a slot out of range, or a slot whose context would overflow
  // (naming the limit); Interrupted when the runtime's check asks.
  void step(std::span<const StepRow> rows, float* logits);
  // Positions held by SLOT.
  std::int32_t length(int slot) const;
  // Empties SLOT (its cache is overwritten from position 0 by its next rows).
  void reset(int slot);

  // What each layer runs on (one line per kind of kernel), for explain and --verbose.
  std::string describe() const;
  // Bytes one decoded token reads of weights (experts: the active ones at top_k), for
  // bandwidth reports.
  std::uint64_t bytes_per_token() const;
  std::uint64_t kv_cache_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxmoe::llm
