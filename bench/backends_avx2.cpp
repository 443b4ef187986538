// The ymm paths (avx2_int8, avx2_int16, avx2) side by side with their AVX-512 counterparts, in one
// process so that the noise of a shared machine hits them alike (docs/perf/BACKENDS_AVX2.md).
//
// Kernel loops, one thread: the work of one driver task, weights either L2-resident (one
// task's bytes, again and again: what the core can compute) or streamed (the next task's
// bytes of a 512 MB pool each time: what DRAM feeds one core). Read them best-of-N (the
// `min` statistic): the shortest time is the one least disturbed by other processes.
//   int8_task/<kernel>/<tokens>/<streamed>: a GEMM1 task (4 groups x 90 blocks, 98 KB);
//     kernel 0 = int8_block32_gemm_16x8__avx2, 1 = int8_block32_gemm_16x8__avx512_vnni,
//     2 = int16_block32_gemm_16x8__avx2 (avx2_int16's vpmaddwd on int16 activations, same
//     packing). ns/block = per (group, 32-block).
//   strip_step/<variant>/<tokens>/<streamed>: a run of 8 strips of the avx2 backend
//     (4 rows x 2880, 8 x 6.1 KB); variant 0 = decode then dot (the multi-token path),
//     1 = fused, fp16 words converted from registers, 2 = fused, converted from memory.
// Layer calls, 1 and 2 threads (gpt-oss-20b, 3 packed copies cycled, a new routing per call),
// and the DRAM read of the same process right before them:
//   dram_read/<threads>: 256 MB read with 256-bit loads (what `mxmoe bench --limits` measures
//     under MXMOE_MAX_ISA=avx2).
//   layer/<backend>/<tokens>/<threads>: backend 0 = avx2_int8 (int8), 1 = avx2 (bf16),
//     2 = avx512_vnni (int8), 3 = avx2 (f32), 4 = avx2_int16 (bf16).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/expert_batch.hpp"
#include "backends/float/avx2_ops.hpp"
#include "backends/integer/int16_kernels.hpp"
#include "backends/integer/int8_kernels.hpp"
#include "backends/kernel.hpp"
#include "backends/registry.hpp"
#include "base/huge_pages.hpp"
#include "base/thread_pool.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/oracle.hpp"
#include "mxmoe/weights.hpp"
#include "perf/isa_loops.hpp"

namespace mxmoe {
namespace {

namespace k = int8_kernels;

constexpr std::size_t kPoolBytes = std::size_t{512} << 20;
constexpr int kBlocks = 90;  // K = 2880
constexpr int kGroups = 4;   // one GEMM1 task: [gate 16 | up 16 | gate 16 | up 16]
constexpr std::size_t kTaskBytes = kGroups * kBlocks * group16::kBlockBytes;

const IsaFeatures& isa() {
  static const IsaFeatures f = probe_hardware().isa;
  return f;
}

// A 64-byte aligned pool of random bytes (valid MXFP4: any nibble and scale byte is).
struct Pool {
  std::unique_ptr<std::byte[]> storage;
  std::uint8_t* data = nullptr;
  explicit Pool(std::size_t bytes) : storage(new std::byte[bytes + 4096]) {
    const auto at = reinterpret_cast<std::uintptr_t>(storage.get());
    data = reinterpret_cast<std::uint8_t*>(storage.get() + ((at + 4095) / 4096 * 4096 - at));
    advise_huge_pages(data, bytes);
    std::mt19937 rng(1);
    for (std::size_t i = 0; i < bytes; i += 4) {
      const auto v = static_cast<std::uint32_t>(rng());
      std::memcpy(data + i, &v, 4);
    }
    // Scale bytes near 127 so that sums stay ordinary numbers.
    for (std::size_t b = 0; b + group16::kBlockBytes <= bytes; b += group16::kBlockBytes)
      for (std::size_t i = 0; i < 16; ++i) data[b + group16::kNibbleBytes + i] = 120 + (i & 7);
  }
};

Pool& pool() {
  static Pool p(kPoolBytes);
  return p;
}

struct QuantInput {
  std::vector<std::int8_t> q;
  std::vector<float> d;
  std::vector<std::int32_t> corr;
  k::QuantRows rows(std::int64_t cols) const {
    return {q.data(), d.data(), corr.data(), cols, cols / 32};
  }
};

QuantInput quantized(int tokens, int cols) {
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens * cols));
  for (float& v : x) v = dist(rng);
  QuantInput in{std::vector<std::int8_t>(x.size(), 0), std::vector<float>(x.size() / 32),
                std::vector<std::int32_t>(x.size() / 32)};
  k::int8_block32_quantize__avx2(x.data(), static_cast<std::int64_t>(x.size()), in.q.data(),
                                 in.d.data(), in.corr.data());
  return in;
}

// The same input as int16 blocks (avx2_int16).
struct QuantInput16 {
  std::vector<std::int16_t> q;
  std::vector<float> d;
  std::vector<std::int32_t> corr;
};
QuantInput16 quantized16(int tokens, int cols) {
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens * cols));
  for (float& v : x) v = dist(rng);
  QuantInput16 in{std::vector<std::int16_t>(x.size(), 0), std::vector<float>(x.size() / 32),
                  std::vector<std::int32_t>(x.size() / 32)};
  int16_kernels::int16_block32_quantize__avx2(x.data(), static_cast<std::int64_t>(x.size()),
                                              in.q.data(), in.d.data(), in.corr.data());
  return in;
}

void int8_task(benchmark::State& state) {
  const auto kernel = state.range(0);
  const int tokens = static_cast<int>(state.range(1));
  const bool streamed = state.range(2) != 0;
  if (kernel == 1 ? !isa().avx512_vnni : !isa().avx2) {
    state.SkipWithError("ISA not available");
    return;
  }
  const QuantInput in = quantized(tokens, 32 * kBlocks);
  const k::QuantRows x = in.rows(32 * kBlocks);
  const QuantInput16 in16 = quantized16(tokens, 32 * kBlocks);
  const int16_kernels::QuantRows16 x16{in16.q.data(), in16.d.data(), in16.corr.data(), 32 * kBlocks,
                                       kBlocks};
  std::vector<float> out(static_cast<std::size_t>(tokens * 64));
  const std::size_t tasks = streamed ? kPoolBytes / kTaskBytes : 1;
  std::size_t next = 0;
  for (auto _ : state) {
    const std::uint8_t* task = pool().data + next * kTaskBytes;
    for (int g = 0; g < kGroups; ++g) {
      const std::uint8_t* group =
          task + static_cast<std::size_t>(g) * kBlocks * group16::kBlockBytes;
      float* dst = out.data() + 16 * g;
      if (kernel == 2)
        int16_kernels::int16_block32_gemm_16x8__avx2(group, kBlocks, x16, tokens, dst, 64);
      else
        (kernel == 1 ? &k::int8_block32_gemm_16x8__avx512_vnni : &k::int8_block32_gemm_16x8__avx2)(
            group, kBlocks, x, tokens, dst, 64);
    }
    benchmark::DoNotOptimize(out.data());
    next = (next + 1) % tasks;
  }
  const auto blocks = static_cast<double>(state.iterations()) * kGroups * kBlocks;
  using benchmark::Counter;
  state.counters["ns/block"] = Counter(blocks / 1e9, Counter::kIsRate | Counter::kInvert);
  state.counters["GB/s"] =
      Counter(blocks * static_cast<double>(group16::kBlockBytes) / 1e9, Counter::kIsRate);
  state.counters["GOP/s"] = Counter(blocks * 16 * 32 * 2 * tokens / 1e9, Counter::kIsRate);
}

// A run of kStrips strips, as one task of the strip driver decodes them.
constexpr int kStrips = 8;
constexpr std::size_t kStripNibbles = kBlocks * strip::kStepNibbleBytes;
constexpr std::size_t kStripBytes = kStripNibbles + kBlocks * strip::kStripRows;

void strip_step(benchmark::State& state) {
  const auto variant = state.range(0);
  const int tokens = static_cast<int>(state.range(1));
  const bool streamed = state.range(2) != 0;
  if (!isa().avx2 || !isa().fma) {
    state.SkipWithError("ISA not available");
    return;
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens * 32 * kBlocks));
  for (float& v : x) v = dist(rng);
  const void* rows[avx2_kernels::kMaxTokens];
  for (int t = 0; t < tokens; ++t) rows[t] = x.data() + t * 32 * kBlocks;
  const std::size_t decoded_bytes = kBlocks * strip::kStripRows * (32 + 1) * sizeof(float);
  std::vector<float> decoded_storage(decoded_bytes / sizeof(float) + 16);
  void* decoded = reinterpret_cast<void*>(
      (reinterpret_cast<std::uintptr_t>(decoded_storage.data()) + 63) / 64 * 64);
  float out[strip::kStripRows * avx2_kernels::kMaxTokens];
  const std::size_t runs = streamed ? kPoolBytes / (kStrips * kStripBytes) : 1;
  std::size_t next = 0;
  for (auto _ : state) {
    const std::uint8_t* run = pool().data + next * kStrips * kStripBytes;
    for (int s = 0; s < kStrips; ++s) {
      const std::uint8_t* p = run + static_cast<std::size_t>(s) * kStripBytes;
      const strip::PackedStrip st{p, p + kStripNibbles, kBlocks, false};
      if (variant == 1) {
        avx2_kernels::fp32_strips_fused_dot_4x2__avx2(st, rows, tokens, out);
      } else if (variant == 2) {
        avx2_kernels::fp32_strips_fused_dot_via_memory_4x2__avx2(st, rows, tokens, out);
      } else {
        avx2_kernels::fp32_strips_decode__avx2(st, decoded);
        avx2_kernels::fp32_strips_dot_4x2__avx2(decoded, kBlocks, false, rows, tokens, out);
      }
      benchmark::DoNotOptimize(out);
    }
    next = (next + 1) % runs;
  }
  const auto steps = static_cast<double>(state.iterations()) * kStrips * kBlocks;
  using benchmark::Counter;
  state.counters["ns/step"] = Counter(steps / 1e9, Counter::kIsRate | Counter::kInvert);
  state.counters["GB/s"] =
      Counter(steps * static_cast<double>(strip::kStepNibbleBytes + strip::kStripRows) / 1e9,
              Counter::kIsRate);
  state.counters["GFLOP/s"] =
      Counter(steps * strip::kStripRows * 32 * 2 * tokens / 1e9, Counter::kIsRate);
}

void dram_read(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  constexpr std::size_t kBytes = std::size_t{256} << 20;  // 8x this machine's 32 MB L3
  static std::vector<std::byte> buffer = [] {
    std::vector<std::byte> b(kBytes + 4096, std::byte{1});
    return b;
  }();
  auto* base = reinterpret_cast<std::byte*>(
      (reinterpret_cast<std::uintptr_t>(buffer.data()) + 4095) / 4096 * 4096);
  const std::size_t chunk = kBytes / static_cast<std::size_t>(threads) / 512 * 512;
  std::uint64_t sink = 0;
  for (auto _ : state) {
    std::vector<std::thread> workers(static_cast<std::size_t>(threads));
    std::vector<std::uint64_t> sums(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t)
      workers[static_cast<std::size_t>(t)] = std::thread([&, t] {
        sums[static_cast<std::size_t>(t)] =
            perf::loops::read_avx2(base + static_cast<std::size_t>(t) * chunk, chunk);
      });
    for (auto& w : workers) w.join();
    for (std::uint64_t v : sums) sink += v;
  }
  benchmark::DoNotOptimize(sink);
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(chunk) * threads / 1e9,
      benchmark::Counter::kIsRate);
}

// Layer calls through the ExpertKernel contract, as bench/backends_int8.cpp.
constexpr int kCopies = 3;
constexpr int kRoutings = 8;

struct LayerSetup {
  std::string key;
  LayerSpec spec = preset("gpt-oss-20b");
  std::vector<std::unique_ptr<ExpertKernel>> copies;
};

LayerSetup& layer_setup(const char* backend, ActivationFormat format) {
  static LayerSetup s;
  const std::string key = std::string(backend) + "/" + std::string(to_string(format));
  if (s.key == key) return s;
  s.copies.clear();
  s.key = key;
  Deployment d;
  d.layer = s.spec;
  d.hardware = probe_hardware();
  d.request.activation = format;
  for (int c = 0; c < kCopies; ++c) {
    const LayerStorage storage = LayerStorage::random(s.spec, 100 + static_cast<unsigned>(c));
    s.copies.push_back(find_backend(backend)->create(d, storage.weights()));
  }
  return s;
}

struct Routed {
  GroupedSlots grouped;
  std::int64_t experts_touched = 0;
};

void route(std::int64_t tokens, int top_k, int experts, std::mt19937& rng, Routed& r) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * top_k)),
      perm(static_cast<std::size_t>(experts));
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy(perm.begin(), perm.begin() + top_k, ids.begin() + t * top_k);
  }
  group_slots(ids, top_k, experts, r.grouped);
  r.experts_touched =
      static_cast<std::int64_t>(std::set<std::int32_t>(ids.begin(), ids.end()).size());
}

void layer(benchmark::State& state) {
  static constexpr const char* kNames[] = {"avx2_int8", "avx2_fp32", "avx512_vnni_int8",
                                           "avx2_fp32", "avx2_int16"};
  static constexpr ActivationFormat kFormats[] = {ActivationFormat::int8, ActivationFormat::bf16,
                                                  ActivationFormat::int8, ActivationFormat::f32,
                                                  ActivationFormat::bf16};
  const auto which = static_cast<std::size_t>(state.range(0));
  const std::int64_t tokens = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  Deployment probe;
  probe.layer = preset("gpt-oss-20b");
  probe.hardware = probe_hardware();
  probe.request.activation = kFormats[which];
  if (const auto why = find_backend(kNames[which])->check(probe); !why.empty()) {
    state.SkipWithError("does not run here");
    return;
  }
  LayerSetup& s = layer_setup(kNames[which], kFormats[which]);
  const LayerSpec& spec = s.spec;
  std::mt19937 rng(42);
  std::vector<Routed> routings(kRoutings);
  for (Routed& r : routings) route(tokens, spec.top_k, spec.num_experts, rng, r);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens * spec.hidden));
  for (float& v : x) v = dist(rng);
  std::vector<float> out(static_cast<std::size_t>(tokens * spec.top_k * spec.hidden));
  ThreadPool workers(threads);
  std::size_t ws_bytes = 0;
  for (const auto& c : s.copies)
    ws_bytes = std::max(ws_bytes, c->workspace_bytes(tokens, tokens * spec.top_k, threads));
  std::vector<std::byte> ws_storage(ws_bytes + 64);
  auto* ws = reinterpret_cast<std::byte*>(
      (reinterpret_cast<std::uintptr_t>(ws_storage.data()) + 63) / 64 * 64);
  const double expert_bytes = 3.0 * spec.hidden * spec.intermediate * 17.0 / 32.0;
  double bytes = 0;
  std::int64_t call = 0;
  for (auto _ : state) {
    const Routed& r = routings[static_cast<std::size_t>(call % kRoutings)];
    ExpertForward f;
    f.x = x.data();
    f.rows = tokens;
    f.batch = r.grouped.batch;
    f.slot_out = out.data();
    f.pool = &workers;
    f.workspace = ws;
    f.workspace_size = ws_bytes;
    s.copies[static_cast<std::size_t>(call % kCopies)]->run(f);
    benchmark::ClobberMemory();
    bytes += expert_bytes * static_cast<double>(r.experts_touched);
    ++call;
  }
  const double flops =
      2.0 * static_cast<double>(tokens) * spec.top_k * 3.0 * spec.hidden * spec.intermediate;
  using benchmark::Counter;
  state.counters["weight_GB/s"] = Counter(bytes / 1e9, Counter::kIsRate);
  state.counters["GFLOP/s"] = Counter(flops / 1e9, Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(kNames[which]) + "/" + std::string(to_string(kFormats[which])));
}

double min_of(const std::vector<double>& v) {
  return *std::min_element(v.begin(), v.end());
}
double max_of(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end());
}

void kernel_args(benchmark::internal::Benchmark* b, int variants) {
  for (int streamed : {0, 1})
    for (int v = 0; v < variants; ++v)
      for (int tokens : {1, 2, 4, 8, 16}) b->Args({v, tokens, streamed});
  b->ArgNames({"variant", "tokens", "streamed"})
      ->Unit(benchmark::kMicrosecond)
      ->Repetitions(5)
      ->ComputeStatistics("min", min_of)
      ->ReportAggregatesOnly(true);
}

BENCHMARK(int8_task)->Apply([](benchmark::internal::Benchmark* b) { kernel_args(b, 3); });
BENCHMARK(strip_step)->Apply([](benchmark::internal::Benchmark* b) {
  for (int streamed : {0, 1})
    for (int v = 0; v < 3; ++v)
      for (int tokens : {1, 2}) b->Args({v, tokens, streamed});
  b->ArgNames({"variant", "tokens", "streamed"})
      ->Unit(benchmark::kMicrosecond)
      ->Repetitions(5)
      ->ComputeStatistics("min", min_of)
      ->ReportAggregatesOnly(true);
});
// Wall-clock figures on a shared machine: many short repetitions, and the best of them (the
// `max` of a rate, the `min` of a time) is the one least disturbed, as `mxmoe bench --limits`
// takes the best pass. Use --benchmark_min_time=0.05 --benchmark_repetitions=30 or so.
BENCHMARK(dram_read)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->ComputeStatistics("min", min_of)
    ->ComputeStatistics("max", max_of);
BENCHMARK(layer)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {1, 8, 512}, {1, 2}})
    ->ArgNames({"backend", "tokens", "threads"})
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMicrosecond)
    ->ComputeStatistics("min", min_of)
    ->ComputeStatistics("max", max_of);

}  // namespace
}  // namespace mxmoe

BENCHMARK_MAIN();
