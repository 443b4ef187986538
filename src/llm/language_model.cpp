// LanguageModel (include/mxmoe/llm.hpp): sequences on the decoder's slots, prefill in chunks,
// decode one token per sequence per step, sampling and stop tokens.
#include "mxmoe/llm.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <stdexcept>

#include "llm/decoder.hpp"
#include "llm/sampler.hpp"

namespace mxmoe {

struct LanguageModel::Impl {
  llm::Decoder decoder;
  LlmOptions options;
  std::vector<float> logits;  // [max_batch, vocab]
};

namespace {

llm::DecoderOptions decoder_options(const LlmOptions& o) {
  if (o.max_context < 1 || o.max_batch < 1 || o.prefill_chunk < 1)
    throw std::invalid_argument(fmt::format(
        "max_context ({}), max_batch ({}) and prefill_chunk ({}) must be >= 1", o.max_context,
        o.max_batch, o.prefill_chunk));
  if (o.max_batch > 4096 || o.prefill_chunk > kMaxTokensPerCall)
    throw std::invalid_argument(fmt::format("max_batch ({}) must be <= 4096 and prefill_chunk ({}) <= {}",
                                            o.max_batch, o.prefill_chunk, kMaxTokensPerCall));
  return {.request = o.request,
          .max_context = o.max_context,
          .max_slots = o.max_batch,
          .max_step_rows = std::max(o.prefill_chunk, o.max_batch),
          .memory_limit = o.memory_limit,
          .compact = o.compact,
          .progress = o.progress};
}

void check_params(const SamplingParams& p) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  if (p.max_tokens < 1) bad(fmt::format("max_tokens must be >= 1, got {}", p.max_tokens));
  if (!(p.temperature >= 0.0f) || p.temperature > 1e4f)
    bad(fmt::format("temperature must be in [0, 10000], got {}", p.temperature));
  if (p.top_k < 0) bad(fmt::format("top_k must be >= 0, got {}", p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad(fmt::format("top_p must be in (0, 1], got {}", p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad(fmt::format("min_p must be in [0, 1], got {}", p.min_p));
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
  check_params(params);
  llm::Decoder& dec = impl_->decoder;
  const int vocab = dec.config().vocab;
  const std::size_t n = prompts.size();
  if (n == 0) return {};
  if (n > static_cast<std::size_t>(impl_->options.max_batch))
    throw std::invalid_argument(fmt::format("{} prompts exceed max_batch ({}, --max-batch)", n,
                                            impl_->options.max_batch));
  for (std::size_t i = 0; i < n; ++i) {
    const auto& p = prompts[i];
    if (p.empty()) throw std::invalid_argument(fmt::format("prompt {} is empty", i));
    for (std::size_t t = 0; t < p.size(); ++t)
      if (p[t] < 0 || p[t] >= vocab)
        throw std::invalid_argument(fmt::format(
            "prompt {}: token {} (at {}) is outside the vocabulary [0, {})", i, p[t], t, vocab));
    if (static_cast<std::int64_t>(p.size()) + params.max_tokens > impl_->options.max_context)
      throw std::invalid_argument(fmt::format(
          "prompt {}: {} tokens + max_tokens {} exceed the context of {} tokens (--max-context)", i,
          p.size(), params.max_tokens, impl_->options.max_context));
  }
  std::vector<std::int32_t> stops = dec.config().eos_ids;
  for (std::int32_t id : params.stop_ids) stops.push_back(id);
  auto is_stop = [&](std::int32_t t) {
    return !params.ignore_eos && std::find(stops.begin(), stops.end(), t) != stops.end();
  };

  std::vector<Completion> out(n);
  std::vector<llm::Sampler> samplers;
  samplers.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    dec.reset(static_cast<int>(i));
    samplers.emplace_back(llm::SamplerSettings{params.temperature, params.top_k, params.top_p,
                                               params.min_p, params.seed});
  }
  std::vector<bool> active(n, true);
  std::vector<std::int32_t> last(n, 0);
  const std::size_t vocab_n = static_cast<std::size_t>(vocab);
  std::vector<llm::StepRow> rows;
  rows.reserve(static_cast<std::size_t>(dec.options().max_step_rows));

  // One token chosen for sequence i from the logits at ROW.
  auto choose = [&](std::size_t i, std::size_t row) {
    const std::int32_t t =
        samplers[i].next({impl_->logits.data() + row * vocab_n, vocab_n});
    out[i].tokens.push_back(t);
    last[i] = t;
    if (on_token && !on_token(i, t)) {
      out[i].finish_reason = "cancelled";
      active[i] = false;
    } else if (is_stop(t)) {
      out[i].finish_reason = "stop";
      active[i] = false;
    } else if (static_cast<int>(out[i].tokens.size()) >= params.max_tokens) {
      out[i].finish_reason = "length";
      active[i] = false;
    }
  };
  auto cancel_all = [&] {
    for (std::size_t i = 0; i < n; ++i)
      if (active[i]) {
        out[i].finish_reason = "cancelled";
        active[i] = false;
      }
  };

  // Prefill: the prompts' tokens in steps of max_step_rows; a prompt's last row gives logits.
  const auto step_rows = static_cast<std::size_t>(dec.options().max_step_rows);
  std::size_t seq = 0, at = 0;
  std::vector<std::size_t> finishing, who;  // reused by every step
  finishing.reserve(n);
  who.reserve(n);
  while (seq < n) {
    if (cancel && cancel()) {
      cancel_all();
      return out;
    }
    rows.clear();
    finishing.clear();  // sequences whose last prompt row is in this step
    while (seq < n && rows.size() < step_rows) {
      const auto& p = prompts[seq];
      const std::size_t take = std::min(step_rows - rows.size(), p.size() - at);
      for (std::size_t t = 0; t < take; ++t)
        rows.push_back({p[at + t], static_cast<std::int32_t>(seq), at + t + 1 == p.size()});
      at += take;
      if (at == p.size()) {
        finishing.push_back(seq);
        ++seq;
        at = 0;
      }
    }
    dec.step(rows, impl_->logits.data());
    for (std::size_t j = 0; j < finishing.size(); ++j) choose(finishing[j], j);
  }
  // Decode: one row per active sequence.
  for (;;) {
    rows.clear();
    who.clear();
    for (std::size_t i = 0; i < n; ++i)
      if (active[i]) {
        rows.push_back({last[i], static_cast<std::int32_t>(i), true});
        who.push_back(i);
      }
    if (rows.empty()) break;
    if (cancel && cancel()) {
      cancel_all();
      break;
    }
    dec.step(rows, impl_->logits.data());
    for (std::size_t j = 0; j < who.size(); ++j) choose(who[j], j);
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
