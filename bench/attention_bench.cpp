// A decoder's attention (llm::attend over a KV cache) with each kernel this CPU runs
// (avx512_attention, avx2_attention, portable_attention: one numerics class, the same bits):
// the prefill of 512 rows of one sequence (positions 0..511) and one decode row at position
// 511 or 4095 (a long chat's context: the softmax's exponentials grow with it), on 1 thread, for
// gpt-oss-20b's shape (64 heads, 8 kv heads of 64, full and a window of 128, sinks) and
// Qwen3-30B-A3B's (32 heads, 4 kv heads of 128). CPU time is the figure to read on a shared
// machine. Counter GFLOP/s: 4 head_dim flops per (head, key) (q.k and w.v).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/dense/dense_attention.hpp"
#include "base/thread_pool.hpp"
#include "llm/attention.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe {
namespace {

struct Shape {
  const char* name;
  int heads, kv_heads, head_dim, window;
};

void run(benchmark::State& state, const Shape& s, const char* cap, int rows, int context) {
  const dense::AttentionSelection sel =
      dense::judge_attention_kernels(s.head_dim, probe_hardware(cap));
  llm::KvCache cache(1, 1, context, s.kv_heads, s.head_dim);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto kv_row = static_cast<std::size_t>(s.kv_heads * s.head_dim);
  for (int p = 0; p < context; ++p)
    for (std::size_t i = 0; i < kv_row; ++i) {
      cache.key(0, 0, p)[i] = normal(rng);
      cache.value(0, 0, p)[i] = normal(rng);
    }
  std::vector<llm::QueryRow> qrows;
  for (int r = 0; r < rows; ++r) qrows.push_back({0, context - rows + r});
  const std::size_t q_row = static_cast<std::size_t>(s.heads * s.head_dim);
  std::vector<float> q(q_row * qrows.size()), out(q.size());
  for (float& x : q) x = 0.3f * normal(rng);
  std::vector<float> sinks(static_cast<std::size_t>(s.heads), 0.5f);
  const llm::AttentionShape shape{.heads = s.heads,
                                  .kv_heads = s.kv_heads,
                                  .head_dim = s.head_dim,
                                  .window = s.window,
                                  .sinks = sinks.data(),
                                  .scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim))};
  ThreadPool pool(1);
  const std::size_t stride = llm::attention_scratch_floats(context, s.heads / s.kv_heads);
  std::vector<float> scratch(stride);
  double pairs = 0;  // (head, key) pairs a call
  for (const llm::QueryRow& r : qrows) {
    const int first = s.window > 0 ? std::max(0, r.position - s.window + 1) : 0;
    pairs += static_cast<double>(s.heads) * (r.position - first + 1);
  }
  for (auto _ : state) {
    llm::attend(shape, sel.kernels, cache, 0, qrows, q.data(), out.data(), scratch.data(), stride,
                pool);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(sel.chosen);
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * s.head_dim * pairs * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

const Shape kShapes[] = {{"gpt_oss_full", 64, 8, 64, 0},
                         {"gpt_oss_window128", 64, 8, 64, 128},
                         {"qwen3", 32, 4, 128, 0}};

const bool kRegistered = [] {
  for (const Shape& s : kShapes)
    for (const char* cap : {"", "avx2", "none"})
      for (const auto& [rows, context] : {std::pair{512, 512}, {1, 512}, {1, 4096}}) {
        const std::string name =
            std::string(s.name) +
            (rows == 1 ? "/decode_at_" + std::to_string(context) : std::string("/prefill512")) +
            "/cap:" + (*cap ? cap : "probe");
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
          run(st, s, cap, rows, context);
        })->Unit(benchmark::kMillisecond);
      }
  return true;
}();

}  // namespace
}  // namespace mxmoe

BENCHMARK_MAIN();
