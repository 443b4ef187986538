// avx512_vnni and amx_int8 on the gpt-oss-20b layer shape (E=32, top-4, H=I=2880): us/call,
// tokens/s, weight GB/s (bytes of the experts touched / time) and GFLOP/s
// (2 x tokens x top-k x 3 x H x I / time). Weights either stream from DRAM (the calls cycle
// through kCopies distinct packed copies, 3 x 423 MB, each call with a fresh routing) or stay
// cache-resident (one copy, one routing). Args: {tokens, threads, streamed}.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "backends/expert_batch.hpp"
#include "backends/kernel.hpp"
#include "backends/registry.hpp"
#include "base/thread_pool.hpp"
#include "mxmoe/deployment.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/oracle.hpp"
#include "mxmoe/weights.hpp"

namespace {

using namespace mxmoe;

constexpr int kCopies = 3;
constexpr int kRoutings = 8;

struct Setup {
  LayerSpec spec = preset("gpt-oss-20b");
  LayerStorage storage = LayerStorage::random(spec, 1);
  Deployment deployment;
  std::vector<std::unique_ptr<ExpertKernel>> copies;
};

Setup& setup(const char* backend) {
  static Setup vnni, amx;
  Setup& s = std::string_view(backend) == "amx_int8" ? amx : vnni;
  if (s.copies.empty()) {
    s.deployment.layer = s.spec;
    s.deployment.hardware = probe_hardware();
    s.deployment.request.activation = ActivationFormat::int8;
    for (int c = 0; c < kCopies; ++c)
      s.copies.push_back(find_backend(backend)->create(s.deployment, s.storage.weights()));
  }
  return s;
}

// Random distinct experts per token, grouped as the runtime groups them.
struct Batch {
  GroupedSlots grouped;
  std::int64_t experts_touched = 0;
};

void random_batch(std::int64_t tokens, int experts, int top_k, std::mt19937& rng, Batch& b) {
  std::vector<std::int32_t> choice(static_cast<std::size_t>(tokens * top_k)),
      ids(static_cast<std::size_t>(experts));
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::copy(ids.begin(), ids.begin() + top_k, choice.begin() + t * top_k);
  }
  group_slots(choice, top_k, experts, b.grouped);
  b.experts_touched =
      static_cast<std::int64_t>(std::set<std::int32_t>(choice.begin(), choice.end()).size());
}

void run_backend(benchmark::State& state, const char* backend) {
  const IsaFeatures isa = probe_hardware().isa;
  if (!isa.avx512_vnni || (std::string_view(backend) == "amx_int8" && !isa.amx_int8)) {
    state.SkipWithError("ISA not available");
    return;
  }
  const std::int64_t tokens = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const bool streamed = state.range(2) != 0;
  Setup& s = setup(backend);
  const LayerSpec& spec = s.spec;
  std::mt19937 rng(42);
  std::vector<Batch> batches(streamed ? kRoutings : 1);
  for (Batch& b : batches) random_batch(tokens, spec.num_experts, spec.top_k, rng, b);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens * spec.hidden));
  for (float& v : x) v = dist(rng);
  std::vector<float> out(static_cast<std::size_t>(tokens * spec.top_k * spec.hidden));
  ThreadPool pool(threads);
  const std::size_t ws_bytes = s.copies[0]->workspace_bytes(tokens, tokens * spec.top_k, threads);
  auto* ws = static_cast<std::byte*>(::operator new[](ws_bytes, std::align_val_t{64}));
  std::fill(ws, ws + ws_bytes, std::byte{0});

  const double expert_bytes = 3.0 * spec.hidden * spec.intermediate * 17.0 / 32.0;
  double bytes = 0;
  std::int64_t call = 0;
  for (auto _ : state) {
    const Batch& b = batches[static_cast<std::size_t>(call) % batches.size()];
    const ExpertKernel& kernel = *s.copies[streamed ? static_cast<std::size_t>(call % kCopies) : 0];
    ExpertForward f;
    f.x = x.data();
    f.rows = tokens;
    f.batch = b.grouped.batch;
    f.slot_out = out.data();
    f.pool = &pool;
    f.workspace = ws;
    f.workspace_size = ws_bytes;
    kernel.run(f);
    benchmark::ClobberMemory();
    bytes += expert_bytes * static_cast<double>(b.experts_touched);
    ++call;
  }
  ::operator delete[](ws, std::align_val_t{64});
  const double flops =
      2.0 * static_cast<double>(tokens) * spec.top_k * 3.0 * spec.hidden * spec.intermediate;
  using benchmark::Counter;
  state.counters["tokens/s"] =
      Counter(static_cast<double>(tokens), Counter::kIsIterationInvariantRate);
  state.counters["weight_GB/s"] = Counter(bytes / 1e9, Counter::kIsRate);
  state.counters["GFLOP/s"] = Counter(flops / 1e9, Counter::kIsIterationInvariantRate);
  state.SetLabel(streamed ? "streamed" : "cache-resident");
}

void BM_avx512_vnni(benchmark::State& state) {
  run_backend(state, "avx512_vnni_int8");
}
void BM_amx_int8(benchmark::State& state) {
  run_backend(state, "amx_int8");
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int streamed : {1, 0})
    for (int threads : {1, 2})
      for (int tokens : {1, 8, 512}) b->Args({tokens, threads, streamed});
  // CPU column = the whole process's CPU time (all pool threads), which a loaded machine
  // inflates far less than wall time.
  b->ArgNames({"tokens", "threads", "streamed"})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime()
      ->MeasureProcessCPUTime();
}

BENCHMARK(BM_avx512_vnni)->Apply(shapes);
BENCHMARK(BM_amx_int8)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
