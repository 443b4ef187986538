#include "routing/router_logits.hpp"

#include <algorithm>
#include <cstddef>

#include "base/dot.hpp"
#include "base/thread_pool.hpp"

namespace mxmoe {

void compute_router_logits(const float* weight, const float* bias, const float* x,
                           std::int64_t tokens, int experts, int hidden, float* logits,
                           ThreadPool* pool, std::int64_t min_parallel_macs) {
  if (tokens <= 0 || experts <= 0) return;
  const auto h = static_cast<std::size_t>(hidden);
  const std::int64_t blocks = (experts + kRouterExpertsPerTask - 1) / kRouterExpertsPerTask;
  auto task = [&](std::int64_t i, int) {
    const std::int64_t t = i / blocks;
    const int first = static_cast<int>(i % blocks) * kRouterExpertsPerTask;
    const int last = std::min(first + kRouterExpertsPerTask, experts);
    const float* xt = x + static_cast<std::size_t>(t) * h;
    for (int e = first; e < last; ++e) {
      double v = dot_f64(weight + static_cast<std::size_t>(e) * h, xt, h);
      if (bias != nullptr) v += static_cast<double>(bias[e]);
      logits[t * experts + e] = static_cast<float>(v);
    }
  };
  if (pool == nullptr || tokens * experts * std::int64_t{hidden} < min_parallel_macs) {
    for (std::int64_t i = 0; i < tokens * blocks; ++i) task(i, 0);
  } else {
    pool->parallel_for(tokens * blocks, task);
  }
}

}  // namespace mxmoe
