// The router's logits, shared by the layer's hot path and the tools' route_with_router:
//   logits[t, e] = float(dot_f64(W[e, :], x[t, :]) + double(b[e]))
// in double, rounded to float once. Each logit's arithmetic is fixed (dot_f64's order, then
// the bias), so its bits never depend on the thread count or on which thread computes it.
#pragma once

#include <cstdint>

namespace mxmoe {

class ThreadPool;

// Experts per task of the parallel loop: small enough that one token's E logits spread over
// the threads at decode (32 experts -> 4 tasks), large enough that a task (8 dot products of
// H) outweighs handing it out.
inline constexpr int kRouterExpertsPerTask = 8;

// Below this many multiply-adds (tokens x experts x hidden) the logits are computed on the
// calling thread: waking the pool costs more than it saves. gpt-oss-20b's router at 1 token
// (92k) stays serial; Qwen3-30B-A3B's (262k) and DeepSeek-V3's (1.8M) go parallel, as does
// gpt-oss at 3 tokens and up. (bench/router_logits.cpp measures both sides.)
inline constexpr std::int64_t kRouterParallelMacs = std::int64_t{1} << 18;

// weight [experts, hidden], bias [experts] or null, x [tokens, hidden] -> logits
// [tokens, experts]. With a pool and at least min_parallel_macs of work, the (token, block
// of kRouterExpertsPerTask experts) tasks run on the pool; otherwise on the calling thread.
// Same bits either way. Does not allocate.
void compute_router_logits(const float* weight, const float* bias, const float* x,
                           std::int64_t tokens, int experts, int hidden, float* logits,
                           ThreadPool* pool, std::int64_t min_parallel_macs = kRouterParallelMacs);

}  // namespace mxmoe
