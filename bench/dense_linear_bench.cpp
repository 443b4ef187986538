// dense::Linear (src/backends/dense) on whole-model shapes: the gpt-oss-20b attention output
// projection (out 2880, in 4096) and LM head (out 201088, in 2880), bf16 as published (f32
// and bf16 activations), compact_int8 and compact_int4, at 1 and 8 tokens (decode) and 512 (prefill), on all
// logical CPUs.
// "streamed": each call uses the next of enough distinct copies of the matrix to exceed 2x
// the LLC, so weights come from DRAM; the LM head (1.16 GB) always does.
// Counters: GB/s = weight bytes read / time; GFLOP/s = 2 m out in / time; of_dram = GB/s over
// this machine's DRAM read bandwidth (measured at start, all threads, and again at the end);
// The label gives the fp32 FMA peak of the widest unit and the vdpbf16ps peak (all threads).
// Before the timings: each mode's max relative error against float64 (max |y - y64| /
// max |y64|) on random and on heavy-tailed weights of the projection's shape.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/dense/dense_linear.hpp"
#include "base/thread_pool.hpp"
#include "mxmoe/format.hpp"
#include "mxmoe/hardware.hpp"
#include "perf/perf.hpp"
#include "runtime/bind_linear.hpp"

namespace mxmoe {
namespace {

struct Machine {
  Hardware hw = probe_hardware();
  perf::MachineLimits limits;
  double fma_peak = 0;   // GFLOP/s, all threads
  double bf16_peak = 0;  // vdpbf16ps, GFLOP/s, all threads (0: none here)
};

std::vector<std::uint16_t> random_bf16(std::int64_t count, unsigned seed, bool heavy_tailed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::student_t_distribution<float> tails(2.0f);
  std::vector<std::uint16_t> out(static_cast<std::size_t>(count));
  for (auto& v : out) v = f32_to_bf16(heavy_tailed ? 0.01f * tails(rng) : normal(rng));
  return out;
}

// A matrix and its Linear(s): `copies` distinct matrices (same values, distinct memory).
struct Matrix {
  std::vector<std::vector<std::uint16_t>> data;
  std::vector<std::unique_ptr<dense::Linear>> layers;
};

Matrix make_matrix(const Machine& m, std::int64_t out, std::int64_t in, dense::DenseMode mode,
                   int copies, ThreadPool& pool) {
  Matrix mat;
  for (int c = 0; c < copies; ++c) {
    if (!dense::is_compact(mode) || c == 0)
      mat.data.push_back(random_bf16(out * in, 77, false));
    dense::LinearWeights w;
    w.name = "bench";
    w.data = mat.data.back().data();
    w.out = out;
    w.in = in;
    mat.layers.push_back(
        std::make_unique<dense::Linear>(bind_linear(w, mode, m.hw, &pool)));
  }
  if (dense::is_compact(mode)) mat.data.clear();  // the compact copies own theirs
  return mat;
}

void bench_linear(benchmark::State& state, const Machine& machine, std::int64_t out,
                  std::int64_t in, dense::DenseMode mode, bool streamed) {
  const auto m = static_cast<std::int64_t>(state.range(0));
  ThreadPool pool(machine.hw.logical_cpus);
  const double bytes_one =
      static_cast<double>(out * in) *
      (dense::is_compact(mode) ? static_cast<double>(dense::compact_group_block_bytes(mode)) /
                                     (dense::kCompactGroupRows * dense::kBlock)
                               : 2.0);
  const int copies =
      streamed ? std::max(1, static_cast<int>(std::ceil(
                                 2.0 * static_cast<double>(machine.hw.l3_bytes) / bytes_one)) +
                                 1)
               : 1;
  Matrix mat = make_matrix(machine, out, in, mode, copies, pool);
  std::vector<float> x(static_cast<std::size_t>(m * in)), y(static_cast<std::size_t>(m * out));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  std::size_t next = 0;
  for (auto _ : state) {
    mat.layers[next]->forward(x.data(), m, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % mat.layers.size();
  }
  const double calls = static_cast<double>(state.iterations());
  const double gbps = static_cast<double>(mat.layers[0]->weight_bytes()) * calls;
  const double flops = 2.0 * static_cast<double>(m * out * in) * calls;
  state.counters["GB/s"] = benchmark::Counter(gbps / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(fmt::format("{} copies={} DRAM {:.1f} GB/s, fp32 peak {:.0f}, bf16 peak {:.0f} GFLOP/s",
                             mat.layers[0]->kernel_name(), copies,
                             machine.limits.dram_gbps_all_threads, machine.fma_peak,
                             machine.bf16_peak));
}

// One parallel_for of one tiny task per thread, as a decoded token's ~250 small jobs are: the
// time a job costs beyond its work is the workers' wake-up and the join.
void bench_pool_job(benchmark::State& state, const Machine& machine) {
  ThreadPool pool(machine.hw.logical_cpus);
  std::vector<std::int64_t> sink(64 * static_cast<std::size_t>(pool.size()));
  for (auto _ : state) {
    pool.parallel_for(pool.size(), [&](std::int64_t task, int) {
      sink[static_cast<std::size_t>(task) * 64] += task;
    });
  }
  benchmark::DoNotOptimize(sink.data());
  state.counters["jobs/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// Each mode against float64 on one 2880 x 4096 layer, 4 tokens.
void report_accuracy(const Machine& machine) {
  const std::int64_t out = 2880, in = 4096, m = 4;
  ThreadPool pool(machine.hw.logical_cpus);
  for (const bool heavy : {false, true}) {
    const std::vector<std::uint16_t> w16 = random_bf16(out * in, 3, heavy);
    dense::LinearWeights w;
    w.name = "accuracy";
    w.data = w16.data();
    w.out = out;
    w.in = in;
    std::vector<float> x(static_cast<std::size_t>(m * in));
    std::mt19937 rng(9);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
    std::vector<double> ref(static_cast<std::size_t>(m * out));
    double max_ref = 0;
    for (std::int64_t t = 0; t < m; ++t)
      for (std::int64_t o = 0; o < out; ++o) {
        double r = 0;
        for (std::int64_t k = 0; k < in; ++k)
          r += double{bf16_to_f32(w16[static_cast<std::size_t>(o * in + k)])} *
               double{x[static_cast<std::size_t>(t * in + k)]};
        ref[static_cast<std::size_t>(t * out + o)] = r;
        max_ref = std::max(max_ref, std::fabs(r));
      }
    std::string line;
    for (const dense::DenseMode mode :
         {dense::DenseMode::as_published, dense::DenseMode::as_published_bf16,
          dense::DenseMode::compact_int8, dense::DenseMode::compact_int4}) {
      const dense::Linear lin = bind_linear(w, mode, machine.hw, &pool);
      std::vector<float> y(ref.size());
      lin.forward(x.data(), m, y.data(), pool);
      double max_err = 0;
      for (std::size_t i = 0; i < y.size(); ++i)
        max_err = std::max(max_err, std::fabs(double{y[i]} - ref[i]));
      line += fmt::format("{}{} {:.2e}", line.empty() ? "" : ", ", lin.kernel_name(),
                          max_err / max_ref);
    }
    fmt::print("accuracy vs float64, {} weights 2880x4096, 4 tokens, max rel error: {}\n",
               heavy ? "heavy-tailed (t, 2 dof)" : "normal", line);
  }
}

}  // namespace
}  // namespace mxmoe

int main(int argc, char** argv) {
  using mxmoe::dense::DenseMode;
  benchmark::Initialize(&argc, argv);
  mxmoe::Machine machine;
  machine.limits = mxmoe::perf::measure_limits(machine.hw, {0, 0, 1});
  for (const char* peak : {"fp32_fma_avx512", "fp32_fma_avx2", "fp32_fma_neon"})
    machine.fma_peak =
        std::max(machine.fma_peak, machine.limits.peak(peak, machine.hw.logical_cpus));
  machine.bf16_peak = machine.limits.peak("bf16_dp_avx512", machine.hw.logical_cpus);
  fmt::print(
      "DRAM read {:.1f} GB/s ({} threads), {:.1f} GB/s (1 thread); fp32 FMA peak {:.0f} GFLOP/s\n",
      machine.limits.dram_gbps_all_threads, machine.limits.threads,
      machine.limits.dram_gbps_one_thread, machine.fma_peak);
  mxmoe::report_accuracy(machine);
  struct Shape {
    const char* name;
    std::int64_t out, in;
    bool streamed;
  };
  for (const Shape s : {Shape{"proj_2880x4096/cached", 2880, 4096, false},
                        Shape{"proj_2880x4096/streamed", 2880, 4096, true},
                        Shape{"lm_head_201088x2880", 201088, 2880, false}})
    for (const DenseMode mode :
         {DenseMode::as_published, DenseMode::as_published_bf16, DenseMode::compact_int8,
          DenseMode::compact_int4}) {
      auto* b = benchmark::RegisterBenchmark(
          fmt::format("{}/{}", s.name, mxmoe::dense::to_string(mode)).c_str(),
          [&machine, s, mode](benchmark::State& st) {
            mxmoe::bench_linear(st, machine, s.out, s.in, mode, s.streamed);
          });
      b->Arg(1)->Arg(8)->UseRealTime()->Unit(benchmark::kMillisecond);
      if (!s.streamed && s.out < 10000) b->Arg(512);
    }
  benchmark::RegisterBenchmark(
      "pool_job", [&machine](benchmark::State& st) { mxmoe::bench_pool_job(st, machine); })
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RunSpecifiedBenchmarks();
  mxmoe::perf::remeasure_dram(machine.hw, machine.limits);
  fmt::print("DRAM read at the end: {:.1f} GB/s (all threads, best pass of that measurement)\n",
             machine.limits.dram_latest_all_threads);
  benchmark::Shutdown();
  return 0;
}
