// ContinuousBatch (include/mxmoe/llm.hpp): sequences on the decoder's slots, joining and
// leaving at token boundaries; decode rows first, then prompt chunks up to the step budget.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <utility>

#include "llm/language_model_impl.hpp"
#include "llm/sampler.hpp"

namespace mxmoe {

namespace llm {

void check_sampling(const SamplingParams& p) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  if (p.max_tokens < 1) bad(fmt::format("max_tokens must be >= 1, got {}", p.max_tokens));
  if (!(p.temperature >= 0.0f) || p.temperature > 1e4f)
    bad(fmt::format("temperature must be in [0, 10000], got {}", p.temperature));
  if (p.top_k < 0) bad(fmt::format("top_k must be >= 0, got {}", p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad(fmt::format("top_p must be in (0, 1], got {}", p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad(fmt::format("min_p must be in [0, 1], got {}", p.min_p));
}

}  // namespace llm

namespace {

constexpr int kMaxTopLogprobs = 20;  // OpenAI's limit for top_logprobs

struct Sequence {
  std::uint64_t id = 0;
  std::int32_t slot = 0;
  std::vector<std::int32_t> prompt;
  std::size_t fed = 0;      // prompt tokens in the cache
  std::size_t feeding = 0;  // prompt tokens in the step being run
  llm::Sampler sampler;
  int max_tokens = 0;
  bool ignore_eos = false;
  std::vector<std::int32_t> stops;  // the model's EOS ids and the request's
  int produced = 0;
  std::int32_t last = 0;
  int logprobs = -1;
  std::vector<TokenLogprob> top;  // capacity `logprobs`, refilled at each token
  bool done = false;

  bool decoding() const noexcept { return !done && fed == prompt.size(); }
  bool is_stop(std::int32_t t) const noexcept {
    return !ignore_eos && std::find(stops.begin(), stops.end(), t) != stops.end();
  }
};

// log-softmax of ROW at TOKEN, and (when TOP has room) the most likely tokens, best first, the
// lower id first among equals. NaN logits take no part.
float log_probabilities(std::span<const float> row, std::int32_t token, std::vector<TokenLogprob>& top,
                        std::size_t want) {
  float m = -std::numeric_limits<float>::infinity();
  for (float v : row)
    if (v > m) m = v;
  double sum = 0.0;
  for (float v : row)
    if (!std::isnan(v)) sum += std::exp(static_cast<double>(v) - static_cast<double>(m));
  const double log_sum = static_cast<double>(m) + std::log(sum);
  top.clear();
  if (want > 0) {
    for (std::size_t i = 0; i < row.size(); ++i) {
      const float v = row[i];
      if (std::isnan(v) || (top.size() == want && !(v > top.back().logprob))) continue;
      if (top.size() < want) top.push_back({});
      std::size_t at = top.size() - 1;
      while (at > 0 && v > top[at - 1].logprob) {
        top[at] = top[at - 1];
        --at;
      }
      top[at] = {static_cast<std::int32_t>(i), v};
    }
    for (auto& t : top) t.logprob = static_cast<float>(static_cast<double>(t.logprob) - log_sum);
  }
  return static_cast<float>(static_cast<double>(row[static_cast<std::size_t>(token)]) - log_sum);
}

}  // namespace

struct ContinuousBatch::Impl {
  LanguageModel::Impl& model;
  std::vector<std::unique_ptr<Sequence>> sequences;  // in the order added; ended ones leave at the next step
  std::vector<std::int32_t> free;                    // free slots, the lowest last
  std::uint64_t next_id = 0;
  std::vector<llm::StepRow> rows;
  std::vector<Sequence*> who;  // the sequence of each row that asks for logits
  std::vector<StepEvent> events;

  void release(Sequence& s) {
    s.done = true;
    free.push_back(s.slot);
  }
};

ContinuousBatch::ContinuousBatch(LanguageModel& model)
    : impl_(std::make_unique<Impl>(Impl{*model.impl_, {}, {}, 0, {}, {}, {}})) {
  const int slots = impl_->model.options.max_batch;
  for (int s = slots - 1; s >= 0; --s) impl_->free.push_back(s);
  impl_->rows.reserve(static_cast<std::size_t>(impl_->model.decoder.options().max_step_rows));
  impl_->who.reserve(static_cast<std::size_t>(slots));
  impl_->events.reserve(static_cast<std::size_t>(slots));
  impl_->sequences.reserve(static_cast<std::size_t>(slots));
}

ContinuousBatch::~ContinuousBatch() = default;

std::uint64_t ContinuousBatch::add(std::span<const std::int32_t> prompt,
                                   const SamplingParams& params, int logprobs) {
  llm::check_sampling(params);
  const llm::Decoder& dec = impl_->model.decoder;
  const int vocab = dec.config().vocab;
  const int context = impl_->model.options.max_context;
  if (logprobs < -1 || logprobs > kMaxTopLogprobs)
    throw std::invalid_argument(
        fmt::format("logprobs must be in [-1, {}], got {}", kMaxTopLogprobs, logprobs));
  if (prompt.empty()) throw std::invalid_argument("the prompt is empty");
  for (std::size_t t = 0; t < prompt.size(); ++t)
    if (prompt[t] < 0 || prompt[t] >= vocab)
      throw std::invalid_argument(fmt::format("token {} (at {}) is outside the vocabulary [0, {})",
                                              prompt[t], t, vocab));
  if (static_cast<std::int64_t>(prompt.size()) + params.max_tokens > context)
    throw std::invalid_argument(
        fmt::format("{} prompt tokens + max_tokens {} exceed the context of {} tokens "
                    "(--max-context)", prompt.size(), params.max_tokens, context));
  if (impl_->free.empty())
    throw std::length_error(fmt::format("all {} sequence slots are taken (--max-batch)",
                                        impl_->model.options.max_batch));
  auto s = std::make_unique<Sequence>(Sequence{
      .id = impl_->next_id,
      .slot = impl_->free.back(),
      .prompt = {prompt.begin(), prompt.end()},
      .fed = 0,
      .feeding = 0,
      .sampler = llm::Sampler({params.temperature, params.top_k, params.top_p, params.min_p, params.seed}),
      .max_tokens = params.max_tokens,
      .ignore_eos = params.ignore_eos,
      .stops = dec.config().eos_ids,
      .produced = 0,
      .last = 0,
      .logprobs = logprobs,
      .top = {},
      .done = false,
  });
  s->stops.insert(s->stops.end(), params.stop_ids.begin(), params.stop_ids.end());
  s->top.reserve(static_cast<std::size_t>(std::max(logprobs, 0)));
  impl_->model.decoder.reset(s->slot);
  impl_->free.pop_back();
  impl_->sequences.push_back(std::move(s));
  return impl_->next_id++;
}

bool ContinuousBatch::cancel(std::uint64_t id) {
  for (auto& s : impl_->sequences)
    if (s->id == id && !s->done) {
      impl_->release(*s);
      return true;
    }
  return false;
}

std::span<const StepEvent> ContinuousBatch::step() {
  Impl& b = *impl_;
  std::erase_if(b.sequences, [](const auto& s) { return s->done; });
  for (auto& s : b.sequences) s->feeding = 0;
  b.events.clear();
  b.rows.clear();
  b.who.clear();
  const auto budget = static_cast<std::size_t>(b.model.decoder.options().max_step_rows);
  for (auto& s : b.sequences)
    if (s->decoding()) {
      b.rows.push_back({s->last, s->slot, true});
      b.who.push_back(s.get());
    }
  for (auto& s : b.sequences) {
    if (s->done || s->decoding()) continue;
    if (b.rows.size() == budget) break;
    const std::size_t take = std::min(budget - b.rows.size(), s->prompt.size() - s->fed);
    s->feeding = take;
    for (std::size_t t = 0; t < take; ++t) {
      const bool last = s->fed + t + 1 == s->prompt.size();
      b.rows.push_back({s->prompt[s->fed + t], s->slot, last});
      if (last) b.who.push_back(s.get());
    }
  }
  if (b.rows.empty()) return {};
  b.model.decoder.step(b.rows, b.model.logits.data());  // commits nothing when it throws
  // The prompts advance only once the step ran (a refused step commits nothing).
  for (auto& s : b.sequences) s->fed += std::exchange(s->feeding, 0);
  const auto vocab = static_cast<std::size_t>(b.model.decoder.config().vocab);
  for (std::size_t j = 0; j < b.who.size(); ++j) {
    Sequence& s = *b.who[j];
    const std::span<const float> row(b.model.logits.data() + j * vocab, vocab);
    const std::int32_t t = s.sampler.next(row);
    StepEvent e{.id = s.id, .token = t, .logprob = 0.0f, .top = {}, .finish = nullptr};
    if (s.logprobs >= 0) {
      e.logprob = log_probabilities(row, t, s.top, static_cast<std::size_t>(s.logprobs));
      e.top = s.top;
    }
    ++s.produced;
    s.last = t;
    if (s.is_stop(t)) {
      e.finish = "stop";
    } else if (s.produced >= s.max_tokens) {
      e.finish = "length";
    }
    if (e.finish) b.release(s);
    b.events.push_back(e);
  }
  return b.events;
}

int ContinuousBatch::free_slots() const noexcept {
  return static_cast<int>(impl_->free.size());
}

std::size_t ContinuousBatch::running() const noexcept {
  std::size_t n = 0;
  for (const auto& s : impl_->sequences) n += s->done ? 0u : 1u;
  return n;
}

std::size_t ContinuousBatch::pending_prompt_tokens() const noexcept {
  std::size_t n = 0;
  for (const auto& s : impl_->sequences)
    if (!s->done) n += s->prompt.size() - s->fed;
  return n;
}

}  // namespace mxmoe
