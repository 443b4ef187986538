// The server's counters for /metrics, in Prometheus' text format (version 0.0.4): requests by
// endpoint and status, prompt and generated tokens, the queue, the running sequences, the open
// connections, and histograms of the time to the first token and between tokens. Updated from
// the HTTP and engine threads (one mutex; a few updates per token).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace mxmoe::serve {

class Metrics {
 public:
  void request(const std::string& endpoint, int status);
  void tokens(std::uint64_t prompt, std::uint64_t generated);
  void first_token(double seconds);
  void inter_token(double seconds);
  void queue(std::size_t queued, std::size_t running);
  void connections(std::int64_t delta);

  std::string render() const;

  struct Histogram {
    static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                       0.25,  0.5,    1.0,   2.5,  5.0,  10.0, 30.0};
    std::array<std::uint64_t, kBounds.size()> counts{};  // per bucket (not cumulative)
    std::uint64_t count = 0;
    double sum = 0.0;
    void observe(double v);
  };

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  std::uint64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  std::size_t queued_ = 0, running_ = 0;
  std::int64_t connections_ = 0;
  Histogram ttft_, itl_;
};

}  // namespace mxmoe::serve
