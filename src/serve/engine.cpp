// The engine thread (engine.hpp).
#include "serve/engine.hpp"

#include <fmt/core.h>

#include <algorithm>

namespace mxmoe::serve {

struct Engine::Running {
  std::shared_ptr<Job> job;
  std::uint64_t id = 0;
  std::optional<TextStream> text;
  std::string pending;       // text held back: it may be the start of a stop string
  std::size_t holdback = 0;  // the longest stop string's bytes - 1
  std::size_t completion_tokens = 0;
  std::chrono::steady_clock::time_point last_token;
  JobUpdate update;  // being filled
  bool done = false;
};

Engine::Engine(LanguageModel& model, const Tokenizer* tokenizer, EngineOptions options,
               Metrics& metrics)
    : model_(model), tokenizer_(tokenizer), options_(options), metrics_(metrics), batch_(model) {
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  stop();
}

void Engine::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    draining_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Engine::submit(const std::vector<std::shared_ptr<Job>>& jobs) {
  {
    std::lock_guard lock(mutex_);
    if (draining_ || queue_.size() + jobs.size() > options_.max_queue) return false;
    for (const auto& j : jobs) queue_.push_back(j);
    metrics_.queue(queue_.size(), running_count_);
  }
  wake_.notify_all();
  return true;
}

void Engine::cancel(Job& job) {
  job.cancelled.store(true);
  { std::lock_guard lock(mutex_); }  // the loop sees the flag after it next waits
  wake_.notify_all();
}

void Engine::drain() {
  std::lock_guard lock(mutex_);
  draining_ = true;
}

void Engine::cancel_all() {
  {
    std::lock_guard lock(mutex_);
    draining_ = true;
    cancel_all_ = true;
  }
  wake_.notify_all();
}

std::size_t Engine::active() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + running_count_;
}

void Engine::finish(Running& r, const char* reason, const std::string& error, bool timeout) {
  if (r.done) return;
  r.done = true;
  if (std::string_view(reason) == "stop" || std::string_view(reason) == "length") {
    r.update.text += r.pending;
    if (r.text) r.update.text += r.text->finish();
  }
  r.pending.clear();
  r.update.finish = reason;
  r.update.error = error;
  r.update.timeout = timeout;
  r.update.prompt_tokens = r.job->prompt.size();
  r.update.completion_tokens = r.completion_tokens;
  metrics_.tokens(r.job->prompt.size(), r.completion_tokens);
  r.job->sink(std::move(r.update));
  r.update = {};
}

void Engine::admit(std::unique_lock<std::mutex>& lock) {
  (void)lock;  // held by the caller
  const auto now = std::chrono::steady_clock::now();
  // Cancelled or expired jobs leave the queue without taking a slot.
  for (auto it = queue_.begin(); it != queue_.end();) {
    Job& j = **it;
    const bool expired = now - j.arrived > options_.request_timeout;
    if (j.cancelled.load() || expired) {
      JobUpdate u;
      u.finish = expired ? "error" : "cancelled";
      if (expired) u.error = fmt::format("the request waited longer than {} s", options_.request_timeout.count());
      u.timeout = expired;
      u.prompt_tokens = j.prompt.size();
      j.sink(std::move(u));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  while (!queue_.empty() && batch_.free_slots() > 0) {
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    auto r = std::make_unique<Running>();
    r->job = job;
    try {
      r->id = batch_.add(job->prompt, job->params, job->logprobs);
    } catch (const std::exception& e) {  // checked by the HTTP layer already; kept as a net
      JobUpdate u;
      u.finish = "error";
      u.error = e.what();
      u.prompt_tokens = job->prompt.size();
      job->sink(std::move(u));
      continue;
    }
    if (tokenizer_) r->text.emplace(*tokenizer_, true);
    for (const std::string& s : job->stop) r->holdback = std::max(r->holdback, s.size() - 1);
    running_.push_back(std::move(r));
  }
  running_count_ = running_.size();
  metrics_.queue(queue_.size(), running_count_);
}

void Engine::on_token(Running& r, const StepEvent& e) {
  const auto now = std::chrono::steady_clock::now();
  if (e.token >= 0) {
    if (r.completion_tokens == 0)
      metrics_.first_token(std::chrono::duration<double>(now - r.job->arrived).count());
    else
      metrics_.inter_token(std::chrono::duration<double>(now - r.last_token).count());
    r.last_token = now;
    ++r.completion_tokens;
    if (r.job->logprobs >= 0)
      r.update.tokens.push_back({e.token, e.logprob, {e.top.begin(), e.top.end()}});
    if (r.text) r.pending += r.text->push(e.token);
    // The earliest stop string ends the answer before it.
    std::size_t cut = std::string::npos;
    for (const std::string& s : r.job->stop) cut = std::min(cut, r.pending.find(s));
    if (cut != std::string::npos) {
      r.update.text += r.pending.substr(0, cut);
      r.pending.clear();
      batch_.cancel(r.id);
      finish(r, "stop");
      return;
    }
  }
  if (e.finish) {
    finish(r, e.finish);
    return;
  }
  // Hand on all but what could still become a stop string, never half a UTF-8 character.
  if (r.pending.size() > r.holdback) {
    std::size_t n = r.pending.size() - r.holdback;
    while (n > 0 && n < r.pending.size() && (static_cast<unsigned char>(r.pending[n]) & 0xC0) == 0x80) --n;
    r.update.text += r.pending.substr(0, n);
    r.pending.erase(0, n);
  }
  if (!r.update.text.empty() || !r.update.tokens.empty()) {
    r.job->sink(std::move(r.update));
    r.update = {};
  }
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      // Wakes at least each second: a queued job's timeout is checked even when nothing runs.
      wake_.wait_for(lock, std::chrono::seconds(1), [&] {
        if (stopping_ || cancel_all_ || !running_.empty()) return true;
        if (!queue_.empty() && batch_.free_slots() > 0) return true;
        return std::any_of(queue_.begin(), queue_.end(), [](const auto& j) { return j->cancelled.load(); });
      });
      if (stopping_ || cancel_all_) {
        // The server's shutdown (its --shutdown-timeout passed): an error that says so, which
        // the session answers with a 503 or a stream's error event while the I/O thread still
        // writes. (The engine's own destruction sends it too; nothing reads it then.)
        const std::string why = "the server is shutting down: the request was stopped at the end of its "
                                "--shutdown-timeout";
        for (auto& j : queue_) {
          JobUpdate u;
          u.finish = "error";
          u.error = why;
          u.shutdown = true;
          u.prompt_tokens = j->prompt.size();
          j->sink(std::move(u));
        }
        queue_.clear();
        for (auto& r : running_) {
          batch_.cancel(r->id);
          r->update.shutdown = true;
          finish(*r, "error", why);
        }
        running_.clear();
        running_count_ = 0;
        cancel_all_ = false;
        metrics_.queue(0, 0);
        if (stopping_) return;
        continue;
      }
      admit(lock);
    }
    const auto now = std::chrono::steady_clock::now();
    for (auto& r : running_) {
      if (r->job->cancelled.load()) {
        batch_.cancel(r->id);
        finish(*r, "cancelled");
      } else if (now - r->job->arrived > options_.request_timeout) {
        batch_.cancel(r->id);
        finish(*r, "error", fmt::format("the request took longer than {} s (--request-timeout)",
                                        options_.request_timeout.count()), true);
      }
    }
    std::erase_if(running_, [](const auto& r) { return r->done; });
    if (!running_.empty()) {
      try {
        for (const StepEvent& e : batch_.step())
          for (auto& r : running_)
            if (r->id == e.id && !r->done) {
              on_token(*r, e);
              break;
            }
      } catch (const std::exception& e) {  // the model failed: every running job ends with it
        for (auto& r : running_) {
          batch_.cancel(r->id);
          finish(*r, "error", e.what());
        }
      }
      std::erase_if(running_, [](const auto& r) { return r->done; });
    }
    std::lock_guard lock(mutex_);
    running_count_ = running_.size();
    metrics_.queue(queue_.size(), running_count_);
  }
}

}  // namespace mxmoe::serve
