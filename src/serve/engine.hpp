// The server's engine: one thread that owns the model's ContinuousBatch. Jobs (one prompt of
// a request each) wait in a bounded queue, join the running batch at a token boundary when a
// sequence slot is free, and leave it when they end, are cancelled (their client went away)
// or time out: their slot is free for the next step. Each job's tokens become text here
// (TextStream), stop strings are found and cut here, and what is new is handed to the job's
// sink, which must not block (the HTTP layer posts it to its own thread).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "mxmoe/llm.hpp"
#include "mxmoe/tokenizer.hpp"
#include "serve/metrics.hpp"

namespace mxmoe::serve {

struct GeneratedToken {
  std::int32_t id = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

// What a job gained since its last update; `finish` is set on its last one.
struct JobUpdate {
  std::string text;  // new text (a stop string and what follows it never appear)
  std::vector<GeneratedToken> tokens;  // only when the job asked for logprobs
  std::string finish;                  // "", "stop", "length", "cancelled", "error"
  std::string error;                   // with finish == "error": why
  bool timeout = false;                // with finish == "error": --request-timeout ended it
  bool shutdown = false;               // with finish == "error": the server's shutdown ended it
  std::size_t prompt_tokens = 0;
  std::size_t completion_tokens = 0;
};

struct Job {
  std::vector<std::int32_t> prompt;
  SamplingParams params;
  std::vector<std::string> stop;  // stop strings
  int logprobs = -1;
  std::function<void(JobUpdate&&)> sink;  // called on the engine thread; must not block
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
  std::atomic<bool> cancelled{false};
};

struct EngineOptions {
  std::size_t max_queue = 64;  // jobs waiting for a slot
  std::chrono::seconds request_timeout{600};
};

class Engine {
 public:
  // TOKENIZER may be null (a model given ids only: updates carry no text).
  Engine(LanguageModel& model, const Tokenizer* tokenizer, EngineOptions options, Metrics& metrics);
  ~Engine();  // stop()
  // Cancels what is left (each job gets its last update) and joins the thread; afterwards no
  // sink is called. Idempotent.
  void stop();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues JOBS, all or none: false when they do not fit the queue, or when draining.
  bool submit(const std::vector<std::shared_ptr<Job>>& jobs);
  // Marks JOB cancelled; the engine frees its slot before its next step.
  void cancel(Job& job);
  // Stops taking jobs (submit returns false); the queued and running ones go on.
  void drain();
  // Cancels every queued and running job (each gets its last update).
  void cancel_all();
  // Jobs queued or running.
  std::size_t active() const;

 private:
  struct Running;
  void loop();
  void admit(std::unique_lock<std::mutex>& lock);
  void finish(Running& r, const char* reason, const std::string& error = {}, bool timeout = false);
  void on_token(Running& r, const StepEvent& e);

  LanguageModel& model_;
  const Tokenizer* tokenizer_;
  EngineOptions options_;
  Metrics& metrics_;
  ContinuousBatch batch_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool draining_ = false, cancel_all_ = false, stopping_ = false;
  std::size_t running_count_ = 0;  // under mutex_, for active()

  std::vector<std::unique_ptr<Running>> running_;  // the engine thread's
  std::thread thread_;
};

}  // namespace mxmoe::serve
