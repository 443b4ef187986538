// avx2, avx512_bf16 and amx_bf16 ExpertKernels on the gpt-oss-20b layer shape (E=32, top-4,
// H=I=2880), 1/8/512 tokens, 1 and 2 threads. "streamed": each call uses the next of 4
// distinct packed copies of the layer (4 x ~0.42 GB = 1.7 GB, > 3x the 480 MB LLC), so
// weights come from DRAM; "cached": one copy, the same tokens every call (the touched experts
// stay in the LLC at 1 and 8 tokens).
// Counters: weight GB/s = MXFP4 bytes of the experts touched / time; GFLOP/s = 2 x tokens x
// top-k x 3 x H x I / time.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backends/expert_batch.hpp"
#include "backends/kernel.hpp"
#include "backends/registry.hpp"
#include "base/thread_pool.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/oracle.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {
namespace {

constexpr int kStreamCopies = 4;

struct Setup {
  std::string key;
  LayerSpec spec;
  std::array<std::unique_ptr<ExpertKernel>, kStreamCopies> kernels;
  int copies = 0;
};

// One backend's kernels at a time (each copy is ~0.42 GB packed).
Setup& setup_for(const std::string& backend, ActivationFormat format, int copies) {
  static Setup setup;
  const std::string key =
      backend + "/" + std::string(to_string(format)) + "/" + std::to_string(copies);
  if (setup.key == key) return setup;
  for (auto& k : setup.kernels) k.reset();
  setup.copies = copies;
  setup.key = key;
  setup.spec = preset("gpt-oss-20b");
  Deployment d;
  d.layer = setup.spec;
  d.request.activation = format;
  const Backend* b = find_backend(backend);
  for (int c = 0; c < copies; ++c) {
    const LayerStorage storage = LayerStorage::random(setup.spec, 1000 + static_cast<unsigned>(c));
    setup.kernels[static_cast<std::size_t>(c)] = b->create(d, storage.weights());
  }
  return setup;
}

// Random distinct experts per token, grouped as the runtime groups them.
struct Routed {
  GroupedSlots grouped;
  int experts_touched = 0;
};

void route(std::int64_t tokens, int top_k, int experts, std::uint64_t seed, Routed& r) {
  std::mt19937_64 rng(seed);
  std::vector<int> pool;
  for (int e = 0; e < experts; ++e) pool.push_back(e);
  std::vector<std::int32_t> ids;
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int k = 0; k < top_k; ++k) ids.push_back(pool[static_cast<std::size_t>(k)]);
  }
  group_slots(ids, top_k, experts, r.grouped);
  r.experts_touched = static_cast<int>(std::set<std::int32_t>(ids.begin(), ids.end()).size());
}

void run_bench(benchmark::State& state, const std::string& backend, ActivationFormat format,
               bool streamed) {
  const std::int64_t tokens = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  Deployment probe;
  probe.layer = preset("gpt-oss-20b");
  probe.hardware = probe_hardware();
  probe.request.activation = format;
  if (const auto why = find_backend(backend)->check(probe); !why.empty()) {
    state.SkipWithError((backend + " does not run here: " + why.front().detail).c_str());
    return;
  }
  Setup& s = setup_for(backend, format, streamed ? kStreamCopies : 1);
  const LayerSpec& spec = s.spec;
  Routed r;
  route(tokens, spec.top_k, spec.num_experts, 7, r);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens * spec.hidden));
  for (auto& v : x) v = normal(rng);
  std::vector<float> out(static_cast<std::size_t>(tokens * spec.top_k * spec.hidden));
  ThreadPool pool(threads);
  std::size_t ws_bytes = 0;
  for (int c = 0; c < s.copies; ++c)
    ws_bytes = std::max(ws_bytes, s.kernels[static_cast<std::size_t>(c)]->workspace_bytes(
                                      tokens, tokens * spec.top_k, threads));
  std::vector<std::byte> storage(ws_bytes + 64);
  auto* ws = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(storage.data()) + 63) /
                                          64 * 64);
  ExpertForward f;
  f.x = x.data();
  f.rows = tokens;
  f.batch = r.grouped.batch;
  f.slot_out = out.data();
  f.pool = &pool;
  f.workspace = ws;
  f.workspace_size = ws_bytes;
  std::size_t next = 0;
  for (auto _ : state) {
    s.kernels[next]->run(f);
    next = (next + 1) % static_cast<std::size_t>(s.copies);
    benchmark::DoNotOptimize(out.data());
  }
  const double h = spec.hidden, i = spec.intermediate;
  const double expert_bytes = 3.0 * h * i * 17.0 / 32.0;
  const double flops = 2.0 * static_cast<double>(tokens) * spec.top_k * 3.0 * h * i;
  const auto iters = static_cast<double>(state.iterations());
  using benchmark::Counter;
  state.counters["tokens/s"] = Counter(static_cast<double>(tokens) * iters, Counter::kIsRate);
  state.counters["weight_GB/s"] =
      Counter(r.experts_touched * expert_bytes * iters / 1e9, Counter::kIsRate);
  state.counters["GFLOP/s"] = Counter(flops * iters / 1e9, Counter::kIsRate);
}

void args(benchmark::internal::Benchmark* b) {
  for (int t : {1, 2})
    for (int m : {1, 8, 512}) b->Args({m, t});
  b->ArgNames({"tokens", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

#define MXMOE_FLOAT_BENCH(NAME, BACKEND, FORMAT, STREAMED)         \
  void NAME(benchmark::State& state) {                             \
    run_bench(state, BACKEND, ActivationFormat::FORMAT, STREAMED); \
  }                                                                \
  BENCHMARK(NAME)->Apply(args)

MXMOE_FLOAT_BENCH(amx_bf16_bf16_streamed, "amx_bf16", bf16, true);
MXMOE_FLOAT_BENCH(amx_bf16_bf16_cached, "amx_bf16", bf16, false);
MXMOE_FLOAT_BENCH(avx512_bf16_bf16_streamed, "avx512_bf16", bf16, true);
MXMOE_FLOAT_BENCH(avx512_bf16_bf16_cached, "avx512_bf16", bf16, false);
MXMOE_FLOAT_BENCH(avx2_f32_streamed, "avx2_fp32", f32, true);
MXMOE_FLOAT_BENCH(avx2_f32_cached, "avx2_fp32", f32, false);
MXMOE_FLOAT_BENCH(avx2_bf16_streamed, "avx2_fp32", bf16, true);

}  // namespace
}  // namespace mxmoe

BENCHMARK_MAIN();
