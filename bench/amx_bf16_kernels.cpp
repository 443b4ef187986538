// The amx_bf16 kernels alone, the side-by-side comparisons of docs/perf/BACKENDS_AMX_BF16.md:
//
// BM_gemm1_task: one GEMM1 task of the driver (4 groups of 16 rows, K = 2880 = 90 blocks) for
//   32/64/128 slots, weights streamed from a 512 MB pool (a fresh region per task), with the
//   decode strategies: "driver" (rings for one step, else whole-group buffers decoded in the
//   first step), "every_step" (whole-group buffers decoded again in each step of 32 slots).
// BM_one_row: the 1-token case (one valid row) with the weights in L2 (a 1 MB pool), tiles
//   configured with 1 row (the driver's choice) or 16.
// Counters: ns per 16x16x32 tile product ("ns/product"), packed weight GB/s.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/amx_bf16/bf16_amx_kernels.hpp"
#include "hw/amx_permission.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe {
namespace {

namespace k = bf16_amx;

constexpr int kBlocks = 90;
constexpr std::size_t kGroupBytes = kBlocks * group16::kBlockBytes;

std::string amx_unavailable() {
  const Hardware h = probe_hardware();
  if (!h.isa.amx_bf16 || !h.isa.avx512_bf16) return "no AMX-BF16 on this machine";
  return hw::request_amx_tile_permission();
}

// Packed groups with random codes and foldable scales (120: values around 2^-7).
std::vector<std::uint8_t> packed_pool(std::size_t bytes) {
  std::vector<std::uint8_t> pool(bytes / kGroupBytes * kGroupBytes + 8 * kGroupBytes);
  std::uint32_t state = 12345;
  for (auto& b : pool) {
    state = state * 1664525u + 1013904223u;
    b = static_cast<std::uint8_t>(state >> 24);
  }
  for (std::size_t g = 0; g < pool.size() / kGroupBytes; ++g)
    for (std::size_t b = 0; b < kBlocks; ++b)
      for (std::size_t i = 0; i < 16; ++i)
        pool[g * kGroupBytes + b * group16::kBlockBytes + group16::kNibbleBytes + i] = 120;
  return pool;
}

template <class T>
T* aligned(std::vector<T>& v) {
  const auto p = reinterpret_cast<std::uintptr_t>(v.data());
  return reinterpret_cast<T*>((p + 63) / 64 * 64);
}

void BM_gemm1_task(benchmark::State& state) {
  if (const std::string why = amx_unavailable(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const int slots = static_cast<int>(state.range(0));
  const bool every_step = state.range(1) != 0;
  static const std::vector<std::uint8_t> pool = packed_pool(std::size_t{512} << 20);
  const std::size_t tasks = pool.size() / kGroupBytes / 4 - 1;
  const int row_tiles = (slots + 15) / 16;
  const std::int64_t a_stride = kBlocks * static_cast<std::int64_t>(k::kATileElems);
  std::vector<std::uint16_t> a_store(static_cast<std::size_t>(row_tiles * a_stride) + 64, 0x3F80);
  std::vector<std::uint16_t> tile_store(4 * kBlocks * k::kBTileElems + 64);
  std::vector<float> h_store(32 * 64 + 16), c_store(256 + 16), scales(4 * kBlocks * 16);
  std::uint16_t* a = aligned(a_store);
  std::uint16_t* tiles = aligned(tile_store);
  float* h = aligned(h_store);
  float* c = aligned(c_store);
  k::bf16_amx_tiles_tile_config__amx_bf16(slots < 16 ? slots : 16);
  std::size_t task = 0;
  for (auto _ : state) {
    const std::uint8_t* group0 = pool.data() + task * 4 * kGroupBytes;
    task = (task + 1) % tasks;
    for (int c0 = 0; c0 < slots; c0 += k::kTokensPerStep) {
      const int m = slots - c0 < k::kTokensPerStep ? slots - c0 : k::kTokensPerStep;
      for (int g = 0; g < 4; g += 2) {
        k::GroupPair pair;
        for (int i = 0; i < 2; ++i) {
          pair.tiles[i] = tiles + static_cast<std::size_t>(g + i) * kBlocks * k::kBTileElems;
          pair.block_scale[i] = scales.data() + static_cast<std::size_t>(g + i) * kBlocks * 16;
        }
        if (c0 == 0 || every_step) {
          pair.packed[0] = group0 + static_cast<std::size_t>(g) * kGroupBytes;
          pair.packed[1] = pair.packed[0] + kGroupBytes;
          pair.ring = !every_step && slots <= k::kTokensPerStep;
        }
        k::bf16_amx_tiles_gemm_32x32__amx_bf16(pair, kBlocks, a + c0 / 16 * a_stride, a_stride, m,
                                               h + 16 * g, 64, c);
      }
    }
    benchmark::DoNotOptimize(h);
  }
  k::bf16_amx_tiles_tile_release__amx_bf16();
  const auto iters = static_cast<double>(state.iterations());
  const double products = 4.0 * kBlocks * row_tiles;
  using benchmark::Counter;
  state.counters["ns/product"] =
      Counter(products * iters * 1e-9, Counter::kIsRate | Counter::kInvert);
  state.counters["weight_GB/s"] = Counter(4.0 * kGroupBytes * iters / 1e9, Counter::kIsRate);
}

void BM_one_row(benchmark::State& state) {
  if (const std::string why = amx_unavailable(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const int config_rows = static_cast<int>(state.range(0));
  static const std::vector<std::uint8_t> pool = packed_pool(std::size_t{1} << 20);
  const std::size_t pairs = pool.size() / kGroupBytes / 2 - 1;
  std::vector<std::uint16_t> a_store(kBlocks * k::kATileElems + 64, 0x3F80);
  std::vector<std::uint16_t> ring_store(2 * k::kDecodeRing * k::kBTileElems + 64);
  std::vector<float> h_store(16 * 32 + 16), c_store(256 + 16);
  std::uint16_t* ring = aligned(ring_store);
  k::bf16_amx_tiles_tile_config__amx_bf16(config_rows);
  std::size_t p = 0;
  for (auto _ : state) {
    k::GroupPair pair;
    pair.tiles[0] = ring;
    pair.tiles[1] = ring + k::kDecodeRing * k::kBTileElems;
    pair.packed[0] = pool.data() + p * 2 * kGroupBytes;
    pair.packed[1] = pair.packed[0] + kGroupBytes;
    pair.ring = true;
    p = (p + 1) % pairs;
    k::bf16_amx_tiles_gemm_32x32__amx_bf16(pair, kBlocks, aligned(a_store), 0, 1, aligned(h_store),
                                           32, aligned(c_store));
    benchmark::DoNotOptimize(h_store.data());
  }
  k::bf16_amx_tiles_tile_release__amx_bf16();
  const auto iters = static_cast<double>(state.iterations());
  using benchmark::Counter;
  state.counters["ns/product"] =
      Counter(2.0 * kBlocks * iters * 1e-9, Counter::kIsRate | Counter::kInvert);
  state.counters["weight_GB/s"] = Counter(2.0 * kGroupBytes * iters / 1e9, Counter::kIsRate);
}

BENCHMARK(BM_gemm1_task)
    ->ArgNames({"slots", "every_step"})
    ->Args({32, 0})
    ->Args({32, 1})
    ->Args({64, 0})
    ->Args({64, 1})
    ->Args({128, 0})
    ->Args({128, 1})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_one_row)->ArgName("tile_rows")->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mxmoe

BENCHMARK_MAIN();
