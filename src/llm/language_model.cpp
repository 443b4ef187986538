// LanguageModel (include/mxmoe/llm.hpp): sequences on the decoder's slots, prefill in chunks,
// decode one token per sequence per step, sampling and stop tokens.
#include "mxmoe/llm.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <stdexcept>

#include "llm/language_model_impl.hpp"

namespace mxmoe {

std::string_view to_string(CompactFormat format) noexcept {
  switch (format) {
    case CompactFormat::off:
      return "off";
    case CompactFormat::int8:
      return "int8";
    case CompactFormat::int4:
      return "int4";
  }
  return "?";
}

CompactFormat parse_compact_format(std::string_view name) {
  for (const CompactFormat f : {CompactFormat::off, CompactFormat::int8, CompactFormat::int4})
    if (name == to_string(f)) return f;
  throw std::invalid_argument(
      fmt::format("unknown compact format '{}': use off, int8 or int4", name));
}

namespace {

llm::DecoderOptions decoder_options(const LlmOptions& o) {
  if (o.max_context < 1 || o.max_batch < 1 || o.prefill_chunk < 1)
    throw std::invalid_argument(fmt::format(
        "max_context ({}), max_batch ({}) and prefill_chunk ({}) must be >= 1", o.max_context,
        o.max_batch, o.prefill_chunk));
  if (o.max_batch > 4096 || o.prefill_chunk > kMaxTokensPerCall)
    throw std::invalid_argument(fmt::format("max_batch ({}) must be <= 4096 and prefill_chunk ({}) <= {}",
                                            o.max_batch, o.prefill_chunk, kMaxTokensPerCall));
  // The compact mode is the 8-bit mode throughout: unless the request names an activation
  // format, the MoE layers take int8 activations too (the experts' int8 kernels, 1.8x the bf16
  // ones' prefill on the Zen 4 guest, docs/PERFORMANCE.md), as the compact matrices' own
  // activations are int8 per 32-block. As published, the families' preference (bf16) stands.
  Request request = o.request;
  if (o.compact != CompactFormat::off && !request.activation)
    request.activation = ActivationFormat::int8;
  return {.request = request,
          .max_context = o.max_context,
          .max_slots = o.max_batch,
          .max_step_rows = std::max(o.prefill_chunk, o.max_batch),
          .memory_limit = o.memory_limit,
          .compact = o.compact,
          .progress = o.progress};
}

}  // namespace

LanguageModel::LanguageModel(const std::string& dir, const Hardware& hardware, Runtime& runtime,
                             LlmOptions options)
    : impl_(std::make_unique<Impl>(Impl{llm::Decoder(dir, hardware, runtime, decoder_options(options)),
                                        options,
                                        {}})) {
  impl_->logits.resize(static_cast<std::size_t>(options.max_batch) *
                       static_cast<std::size_t>(impl_->decoder.config().vocab));
}

LanguageModel::~LanguageModel() = default;
LanguageModel::LanguageModel(LanguageModel&&) noexcept = default;
LanguageModel& LanguageModel::operator=(LanguageModel&&) noexcept = default;

std::string LanguageModel::family() const {
  return std::string(llm::to_string(impl_->decoder.config().family));
}
int LanguageModel::vocab_size() const noexcept {
  return impl_->decoder.config().vocab;
}
int LanguageModel::max_context() const noexcept {
  return impl_->options.max_context;
}
int LanguageModel::max_batch() const noexcept {
  return impl_->options.max_batch;
}
std::vector<std::int32_t> LanguageModel::eos_ids() const {
  return impl_->decoder.config().eos_ids;
}
std::int32_t LanguageModel::bos_id() const noexcept {
  return impl_->decoder.config().bos_id;
}
std::string LanguageModel::describe() const {
  return impl_->decoder.describe();
}
std::uint64_t LanguageModel::bytes_per_token() const {
  return impl_->decoder.bytes_per_token();
}
std::uint64_t LanguageModel::kv_cache_bytes() const {
  return impl_->decoder.kv_cache_bytes();
}

std::vector<Completion> LanguageModel::generate(const std::vector<std::vector<std::int32_t>>& prompts,
                                                const SamplingParams& params,
                                                const TokenCallback& on_token,
                                                const std::function<bool()>& cancel) {
  const std::size_t n = prompts.size();
  if (n == 0) return {};
  if (n > static_cast<std::size_t>(impl_->options.max_batch))
    throw std::invalid_argument(fmt::format("{} prompts exceed max_batch ({}, --max-batch)", n,
                                            impl_->options.max_batch));
  ContinuousBatch batch(*this);
  std::vector<std::uint64_t> ids(n);
  for (std::size_t i = 0; i < n; ++i) {
    try {
      ids[i] = batch.add(prompts[i], params);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("prompt {}: {}", i, e.what()));
    }
  }
  // The batch numbers its sequences from 0 in the order they were added.
  std::vector<Completion> out(n);
  while (batch.running() > 0) {
    if (cancel && cancel()) {
      for (std::size_t i = 0; i < n; ++i)
        if (batch.cancel(ids[i])) out[i].finish_reason = "cancelled";
      break;
    }
    for (const StepEvent& e : batch.step()) {
      const auto i = static_cast<std::size_t>(e.id - ids[0]);
      if (e.token >= 0) {
        out[i].tokens.push_back(e.token);
        if (on_token && !on_token(i, e.token)) {
          batch.cancel(e.id);
          out[i].finish_reason = "cancelled";
          continue;
        }
      }
      if (e.finish) out[i].finish_reason = e.finish;
    }
  }
  return out;
}

std::vector<float> LanguageModel::prompt_logits(std::span<const std::int32_t> prompt) {
  llm::Decoder& dec = impl_->decoder;
  const int vocab = dec.config().vocab;
  if (static_cast<std::int64_t>(prompt.size()) > impl_->options.max_context)
    throw std::invalid_argument(fmt::format("a prompt of {} tokens exceeds the context of {} tokens",
                                            prompt.size(), impl_->options.max_context));
  dec.reset(0);
  std::vector<float> out(prompt.size() * static_cast<std::size_t>(vocab));
  const auto step_rows = static_cast<std::size_t>(dec.options().max_step_rows);
  std::vector<llm::StepRow> rows;
  for (std::size_t at = 0; at < prompt.size(); at += step_rows) {
    rows.clear();
    for (std::size_t t = at; t < std::min(prompt.size(), at + step_rows); ++t)
      rows.push_back({prompt[t], 0, true});
    dec.step(rows, out.data() + at * static_cast<std::size_t>(vocab));
  }
  return out;
}

}  // namespace mxmoe
