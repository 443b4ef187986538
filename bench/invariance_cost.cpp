// The cost of batch invariance: the oracle's default selection vs its batch_invariant
// selection for gpt-oss-20b's layer shape (E=32, top-4, H=I=2880, random MXFP4 weights) at
// 1, 8 and 512 tokens, for bf16 and int8 activations. Prints one table row per case with
// the chosen backends and median wall times; the two layers run alternately so machine
// noise hits both alike. Usage: bench_invariance_cost [repetitions (default 9)]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <vector>

#include "mxmoe/layer.hpp"

namespace {

using mxmoe::ActivationFormat;

mxmoe::MoeLayer build(const mxmoe::LayerSpec& spec, const mxmoe::LayerStorage& storage,
                      const mxmoe::Hardware& hw, ActivationFormat f, bool invariant, int tokens,
                      mxmoe::Runtime& runtime) {
  mxmoe::Request r;
  r.activation = f;
  r.batch_invariant = invariant;
  r.tokens_hint = tokens;
  return mxmoe::make_layer(spec, storage.weights(), hw, r, runtime);
}

double seconds_of(mxmoe::MoeLayer& layer, const std::vector<float>& x, int tokens,
                  std::vector<float>& y) {
  const auto start = std::chrono::steady_clock::now();
  layer.forward({.tokens = tokens, .x = x.data(), .y = y.data()});
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 9;
  const mxmoe::LayerSpec spec = mxmoe::preset("gpt-oss-20b");
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  fmt::print(stderr, "generating random weights for {}...\n", spec.name);
  const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 1);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(512 * spec.hidden));
  for (float& v : x) v = normal(rng);
  std::vector<float> y(x.size());
  mxmoe::Runtime runtime(hw.logical_cpus);

  fmt::print("{} (E={}, top-{}, H={}, I={}), {} threads, median of {} calls\n", spec.name,
             spec.num_experts, spec.top_k, spec.hidden, spec.intermediate, hw.logical_cpus, reps);
  fmt::print("{:<6} {:>6}  {:<12} {:>12}  {:<12} {:>12}  {:>8}\n", "format", "tokens", "default",
             "us", "invariant", "us", "cost");
  for (ActivationFormat f : {ActivationFormat::bf16, ActivationFormat::int8}) {
    for (int tokens : {1, 8, 512}) {
      mxmoe::MoeLayer plain = build(spec, storage, hw, f, false, tokens, runtime);
      mxmoe::MoeLayer invariant = build(spec, storage, hw, f, true, tokens, runtime);
      seconds_of(plain, x, tokens, y);  // warm-up: workspace, pages
      seconds_of(invariant, x, tokens, y);
      std::vector<double> t_plain, t_invariant;
      for (int i = 0; i < reps; ++i) {
        t_plain.push_back(seconds_of(plain, x, tokens, y));
        t_invariant.push_back(seconds_of(invariant, x, tokens, y));
      }
      const double a = median(t_plain) * 1e6, b = median(t_invariant) * 1e6;
      fmt::print("{:<6} {:>6}  {:<12} {:>12.1f}  {:<12} {:>12.1f}  {:>+7.1f}%\n", to_string(f),
                 tokens, plain.selection().chosen, a, invariant.selection().chosen, b,
                 100.0 * (b - a) / a);
      std::fflush(stdout);
    }
  }
  return 0;
}
