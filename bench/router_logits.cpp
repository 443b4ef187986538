// The router's logits at decode (1 token): on the calling thread vs over (token, block of
// experts) on a 2-thread pool, for three router shapes. The router weights cycle through
// copies totalling 128 MB so that, as in a step through a real stack, they come from DRAM.
// Serial and parallel calls alternate so machine noise hits both alike. Prints medians and
// p10-p90 in microseconds. Usage: bench_router_logits [repetitions (default 301)]
#include "routing/router_logits.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <vector>

#include "base/thread_pool.hpp"

namespace {

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 301;
  struct Shape {
    const char* name;
    int experts, hidden;
  };
  mxmoe::ThreadPool pool(2);
  fmt::print("| router | E x H | serial us (p10-p90) | 2 threads us (p10-p90) | speed-up |\n");
  fmt::print("|---|---|---:|---:|---:|\n");
  for (const Shape& s : {Shape{"gpt-oss-20b", 32, 2880}, Shape{"qwen3-30b-a3b", 128, 2048},
                         Shape{"deepseek-v3", 256, 7168}}) {
    const std::size_t per_copy =
        static_cast<std::size_t>(s.experts) * static_cast<std::size_t>(s.hidden);
    const std::size_t copies = std::max<std::size_t>(2, (128u << 20) / (per_copy * 4));
    std::vector<float> weights(per_copy * copies), x(static_cast<std::size_t>(s.hidden)),
        logits(static_cast<std::size_t>(s.experts));
    std::mt19937_64 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : weights) v = normal(rng);
    for (float& v : x) v = normal(rng);
    std::vector<double> serial, parallel;
    std::size_t copy = 0;
    for (int r = 0; r < reps + 5; ++r) {
      for (mxmoe::ThreadPool* p : {static_cast<mxmoe::ThreadPool*>(nullptr), &pool}) {
        const float* w = weights.data() + (copy++ % copies) * per_copy;
        const auto t0 = std::chrono::steady_clock::now();
        mxmoe::compute_router_logits(w, nullptr, x.data(), 1, s.experts, s.hidden, logits.data(), p,
                                     /*min_parallel_macs=*/0);  // forced: both sides timed
        const double us =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e6;
        if (r >= 5) (p == nullptr ? serial : parallel).push_back(us);  // 5 warm-up rounds
      }
    }
    fmt::print("| {} | {} x {} | {:.1f} ({:.1f}-{:.1f}) | {:.1f} ({:.1f}-{:.1f}) | {:.2f}x |\n",
               s.name, s.experts, s.hidden, quantile(serial, 0.5), quantile(serial, 0.1),
               quantile(serial, 0.9), quantile(parallel, 0.5), quantile(parallel, 0.1),
               quantile(parallel, 0.9), quantile(serial, 0.5) / quantile(parallel, 0.5));
  }
  return 0;
}
