// Prometheus text for /metrics (metrics.hpp).
#include "serve/metrics.hpp"

#include <fmt/core.h>

namespace mxmoe::serve {

void Metrics::Histogram::observe(double v) {
  std::size_t b = 0;
  while (b < kBounds.size() && v > kBounds[b]) ++b;
  if (b < kBounds.size()) ++counts[b];
  ++count;
  sum += v;
}

void Metrics::request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}

void Metrics::tokens(std::uint64_t prompt, std::uint64_t generated) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
}

void Metrics::first_token(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.observe(seconds);
}

void Metrics::inter_token(double seconds) {
  std::lock_guard lock(mutex_);
  itl_.observe(seconds);
}

void Metrics::queue(std::size_t queued, std::size_t running) {
  std::lock_guard lock(mutex_);
  queued_ = queued;
  running_ = running;
}

void Metrics::connections(std::int64_t delta) {
  std::lock_guard lock(mutex_);
  connections_ += delta;
}

namespace {

void histogram(std::string& out, const char* name, const char* help, const Metrics::Histogram& h) {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b < h.kBounds.size(); ++b) {
    cumulative += h.counts[b];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.kBounds[b], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count, name,
                     h.sum, name, h.count);
}

}  // namespace

std::string Metrics::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  out += "# HELP mxmoe_requests_total HTTP requests answered, by endpoint and status.\n"
         "# TYPE mxmoe_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out += fmt::format("mxmoe_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first,
                       key.second, n);
  out += fmt::format(
      "# HELP mxmoe_prompt_tokens_total Prompt tokens prefilled.\n"
      "# TYPE mxmoe_prompt_tokens_total counter\nmxmoe_prompt_tokens_total {}\n"
      "# HELP mxmoe_generation_tokens_total Tokens generated.\n"
      "# TYPE mxmoe_generation_tokens_total counter\nmxmoe_generation_tokens_total {}\n"
      "# HELP mxmoe_queue_length Requests waiting for a sequence slot.\n"
      "# TYPE mxmoe_queue_length gauge\nmxmoe_queue_length {}\n"
      "# HELP mxmoe_running_sequences Sequences holding a KV-cache slot.\n"
      "# TYPE mxmoe_running_sequences gauge\nmxmoe_running_sequences {}\n"
      "# HELP mxmoe_open_connections Open HTTP connections.\n"
      "# TYPE mxmoe_open_connections gauge\nmxmoe_open_connections {}\n",
      prompt_tokens_, generated_tokens_, queued_, running_, connections_);
  histogram(out, "mxmoe_time_to_first_token_seconds",
            "From a request's arrival to its first generated token.", ttft_);
  histogram(out, "mxmoe_inter_token_latency_seconds",
            "Between two generated tokens of one sequence.", itl_);
  return out;
}

}  // namespace mxmoe::serve
