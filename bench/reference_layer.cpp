// The reference backend on the gpt-oss-20b layer shape (E=32, top-4, H=I=2880) at 1, 16
// and 512 tokens: the baseline every fast backend must beat. Weights are generated once
// (0.42 GB) and stay in memory; f32 activations; the machine's thread count.
#include <benchmark/benchmark.h>

#include <random>
#include <thread>
#include <vector>

#include "mxmoe/layer.hpp"

namespace {

const mxmoe::LayerSpec& spec() {
  static const mxmoe::LayerSpec s = mxmoe::preset("gpt-oss-20b");
  return s;
}

const mxmoe::LayerStorage& storage() {
  static const mxmoe::LayerStorage s = mxmoe::LayerStorage::random(spec(), 1);
  return s;
}

void BM_ReferenceLayer(benchmark::State& state) {
  const std::int64_t tokens = state.range(0);
  mxmoe::Selection sel;
  sel.deployment.layer = spec();
  sel.deployment.hardware.logical_cpus =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  sel.deployment.request.activation = mxmoe::ActivationFormat::f32;
  sel.chosen = "reference";
  mxmoe::Runtime runtime(sel.deployment.hardware.logical_cpus);
  mxmoe::MoeLayer layer(storage().weights(), sel, runtime);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens * spec().hidden)), y(x.size());
  for (float& v : x) v = normal(rng);
  layer.forward(
      {.tokens = tokens, .x = x.data(), .y = y.data()});  // warm-up: workspace, page faults
  for (auto _ : state) {
    layer.forward({.tokens = tokens, .x = x.data(), .y = y.data()});
    benchmark::DoNotOptimize(y.data());
  }
  const double calls = static_cast<double>(state.iterations());
  state.counters["us_per_call"] =
      benchmark::Counter(calls * 1e-6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["tokens_per_s"] =
      benchmark::Counter(calls * static_cast<double>(tokens), benchmark::Counter::kIsRate);
  state.counters["threads"] = layer.threads();
}

BENCHMARK(BM_ReferenceLayer)
    ->Arg(1)
    ->Arg(16)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3)
    ->UseRealTime();
BENCHMARK(BM_ReferenceLayer)->Arg(512)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
