// LanguageModel: a whole MoE model (gpt-oss, Qwen3-MoE, Mixtral) from its published
// checkpoint directory to tokens, in mxmoe itself: the embeddings, attention with its KV cache,
// norms, the MoE layers (MoeLayer, judged by the oracle like any layer), the LM head and the
// sampler. Weights are read in place from the mapping; the experts are packed once by their
// backend. This class speaks token ids; text goes through the model's tokenizer (the CLI's
// complete and chat, the Python package).
//
// Batch invariance: with Request::batch_invariant, a sequence's tokens and logits are
// bit-identical whether it runs alone or in a batch, at any position of the batch and any
// thread count (docs/INVARIANCE.md).
//
// Threads: one LanguageModel must not be used by two threads at once; it computes on its
// Runtime's pool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/deployment.hpp"
#include "mxmoe/export.h"
#include "mxmoe/hardware.hpp"
#include "mxmoe/runtime.hpp"

namespace mxmoe {

// The compact mode's format of the non-expert matrices (attention, dense MLPs, the LM head),
// quantized at load; off: bf16 / f32 as published, read in place. Accuracy of each in
// docs/ACCURACY.md.
enum class CompactFormat : std::uint8_t {
  off,
  int8,  // int8 codes + a float32 scale per 32-block: 1.125 bytes a weight (bf16: 2)
  int4,  // 4-bit codes + a bf16 scale per 32-block: 0.5625 bytes a weight, a 16x coarser step
};
// "off", "int8", "int4"; and back (std::invalid_argument naming the accepted names).
MXMOE_API std::string_view to_string(CompactFormat format) noexcept;
MXMOE_API CompactFormat parse_compact_format(std::string_view name);

struct MXMOE_API LlmOptions {
  // How the MoE layers are judged (activation, batch_invariant, ...). A request that names
  // bf16 activations gets them in the dense matrices too, where the CPU has AVX-512 BF16
  // (vdpbf16ps: twice the f32 FMA's products; docs/ACCURACY.md); unnamed, those run f32 activations.
  Request request;
  int max_context = 4096;    // tokens per sequence, prompt and answer (<= max_position_embeddings)
  int max_batch = 1;         // sequences generated at once
  int prefill_chunk = 256;   // prompt tokens per step
  // The compact mode: the non-expert matrices quantized at load (CompactFormat), so a token
  // reads about half (int8) or a quarter (int4) of their bf16 bytes. A request without an
  // activation format gets int8 in this mode (the MoE layers' int8 kernels; request.activation
  // set to another format keeps that one).
  CompactFormat compact = CompactFormat::off;
  // Bytes the model may take beside its mapping (KV cache, packed experts), checked before
  // anything large is allocated; 0: no check.
  std::uint64_t memory_limit = 0;
  std::function<void(const std::string&)> progress;  // loading progress lines (e.g. to stderr)
};

struct MXMOE_API SamplingParams {
  int max_tokens = 16;       // new tokens per sequence, >= 1
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: no limit
  float top_p = 1.0f;        // (0, 1]
  float min_p = 0.0f;        // [0, 1]
  std::uint64_t seed = 0;    // each sequence samples from its own generator seeded with this
  bool ignore_eos = false;   // run to max_tokens even past a stop token
  std::vector<std::int32_t> stop_ids;  // ids that end a sequence, besides the model's EOS ids
};

struct MXMOE_API Completion {
  std::vector<std::int32_t> tokens;  // the new tokens, a stop token included
  std::string finish_reason;         // "stop" (a stop token), "length" (max_tokens), "cancelled"
};

class MXMOE_API LanguageModel {
 public:
  // Opens DIR (config.json, generation_config.json, the safetensors). Throws LoadError (a
  // missing or malformed file; a tensor that disagrees with config.json, naming it; a family
  // mxmoe does not run whole, naming what is missing), std::invalid_argument (options out of
  // range), std::runtime_error (more memory than memory_limit, naming the bytes),
  // NoBackendError (a MoE layer nothing runs).
  LanguageModel(const std::string& dir, const Hardware& hardware, Runtime& runtime,
                LlmOptions options = {});
  ~LanguageModel();
  LanguageModel(LanguageModel&&) noexcept;
  LanguageModel& operator=(LanguageModel&&) noexcept;

  std::string family() const;  // "gpt_oss", "qwen3_moe", "mixtral"
  int vocab_size() const noexcept;
  int max_context() const noexcept;
  int max_batch() const noexcept;
  std::vector<std::int32_t> eos_ids() const;  // config.json's and generation_config.json's
  std::int32_t bos_id() const noexcept;       // -1 when the model has none

  // Called for each new token of sequence SEQUENCE as it is chosen; returning false ends that
  // sequence ("cancelled"). Between steps, `cancel` (if set) is asked whether to end them all.
  using TokenCallback = std::function<bool(std::size_t sequence, std::int32_t token)>;

  // Completes every prompt (at most max_batch, each non-empty, each token in the vocabulary,
  // and prompt + max_tokens within max_context: std::invalid_argument naming the prompt and the
  // limit, before any work).
  std::vector<Completion> generate(const std::vector<std::vector<std::int32_t>>& prompts,
                                   const SamplingParams& params, const TokenCallback& on_token = {},
                                   const std::function<bool()>& cancel = {});

  // The logits after every position of PROMPT, [prompt.size(), vocab_size()] row-major: what a
  // reference implementation is compared with.
  std::vector<float> prompt_logits(std::span<const std::int32_t> prompt);

  // What runs where: the family and sizes, the dense kernels, each layer's MoE backend.
  std::string describe() const;
  // Bytes of weights one decoded token reads (the active experts only), and the KV cache's.
  std::uint64_t bytes_per_token() const;
  std::uint64_t kv_cache_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend class ContinuousBatch;
};

// A token and its log-probability under the model (the log-softmax of the raw logits, before
// temperature and the other sampling filters, as OpenAI's and vLLM's logprobs are).
struct MXMOE_API TokenLogprob {
  std::int32_t token = 0;
  float logprob = 0.0f;
};

// What one step did to one sequence: a new token, and/or its end.
struct MXMOE_API StepEvent {
  std::uint64_t id = 0;           // the sequence, as add() returned it
  std::int32_t token = -1;        // the new token; -1: none (the sequence ended without one)
  float logprob = 0.0f;           // of TOKEN, when the sequence asked for logprobs
  std::span<const TokenLogprob> top;  // the most likely tokens, best first (valid until the next step)
  const char* finish = nullptr;   // nullptr: still running; "stop", "length" or "cancelled"
};

// Continuous batching on one LanguageModel: sequences join and leave at token boundaries, each
// with its own prompt, sampling and limits. A step carries one decode row for every sequence
// that is generating, then prompt rows of the sequences still prefilling, in the order they
// were added, up to the model's step budget (max(prefill_chunk, max_batch) rows): a long prompt
// is prefilled in chunks while the others keep their pace. A sequence's slot of the KV cache
// is free again the moment it ends or is cancelled. LanguageModel::generate runs on it.
//
// With Request::batch_invariant, a sequence's tokens and logprobs do not depend on the other
// sequences, on its slot, or on how its prompt was split into steps.
//
// Threads: one thread at a time (the model's); at most one ContinuousBatch per model at once.
class MXMOE_API ContinuousBatch {
 public:
  explicit ContinuousBatch(LanguageModel& model);  // the model must outlive it
  ~ContinuousBatch();
  ContinuousBatch(const ContinuousBatch&) = delete;
  ContinuousBatch& operator=(const ContinuousBatch&) = delete;

  // Starts a sequence on a free slot. LOGPROBS: -1 none; 0 the chosen token's; N (<= 20) also
  // the N most likely. Throws std::invalid_argument before any change (params out of range,
  // an empty prompt, a token outside the vocabulary, prompt + max_tokens past max_context,
  // naming the limit) and std::length_error when no slot is free (free_slots() == 0).
  std::uint64_t add(std::span<const std::int32_t> prompt, const SamplingParams& params,
                    int logprobs = -1);
  // Ends sequence ID now ("cancelled"; its slot is free at once); false when it is not running.
  bool cancel(std::uint64_t id);
  // One step of the model. The events of the sequences that got a token in it: first those
  // that were generating, in the order they were added, then those whose prompt ended in this
  // step; valid until the next call. Nothing to do: no events. A step the model refuses or
  // that is interrupted throws and changes no sequence.
  std::span<const StepEvent> step();

  int free_slots() const noexcept;
  std::size_t running() const noexcept;  // sequences holding a slot
  // Prompt tokens not yet prefilled, over all running sequences.
  std::size_t pending_prompt_tokens() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxmoe
