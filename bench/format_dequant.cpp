// MXFP4 dequantization of a gpt-oss-sized weight matrix (2880 x 2880, 90 blocks per row):
// the scalar reference decoder against the vectorized one. Bytes processed = the MXFP4
// bytes read (16 packed bytes + 1 scale byte per block of 32).
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "mxmoe/environment.hpp"
#include "mxmoe/format.hpp"
#include "mxmoe/hardware.hpp"

namespace {

constexpr std::size_t kRows = 2880, kCols = 2880;
constexpr std::size_t kBlocks = kRows * kCols / mxmoe::kMxBlock;

struct Matrix {
  std::vector<std::uint8_t> packed, scales;
  std::vector<float> out;
};

Matrix random_matrix() {
  std::mt19937_64 rng(2880);
  std::uniform_int_distribution<unsigned> byte(0, 255), exponent(112, 132);
  Matrix m{std::vector<std::uint8_t>(kBlocks * mxmoe::kMxfp4BlockBytes),
           std::vector<std::uint8_t>(kBlocks), std::vector<float>(kRows * kCols)};
  for (auto& b : m.packed) b = static_cast<std::uint8_t>(byte(rng));
  for (auto& s : m.scales) s = static_cast<std::uint8_t>(exponent(rng));
  return m;
}

template <void (*Dequantize)(std::span<const std::uint8_t>, std::span<const std::uint8_t>,
                             std::span<float>)>
void BM_DequantizeMxfp4(benchmark::State& state) {
  Matrix m = random_matrix();
  for (auto _ : state) {
    Dequantize(m.packed, m.scales, m.out);
    benchmark::DoNotOptimize(m.out.data());
    benchmark::ClobberMemory();
  }
  const auto mxfp4_bytes = static_cast<std::int64_t>(m.packed.size() + m.scales.size());
  state.SetBytesProcessed(state.iterations() * mxfp4_bytes);
  state.counters["elements"] = benchmark::Counter(static_cast<double>(kRows * kCols),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

// The fastest decoder of this machine's probe (capped by MXMOE_MAX_ISA, as everywhere).
void dequantize_fastest(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> scales,
                        std::span<float> out) {
  static const mxmoe::Mxfp4Decoder decoder =
      mxmoe::fastest_mxfp4_decoder(mxmoe::probe_hardware_from_environment().isa);
  mxmoe::dequantize_mxfp4_fast(packed, scales, out, decoder);
}

BENCHMARK_TEMPLATE(BM_DequantizeMxfp4, mxmoe::dequantize_mxfp4)->Name("mxfp4_2880x2880/scalar");
BENCHMARK_TEMPLATE(BM_DequantizeMxfp4, dequantize_fastest)->Name("mxfp4_2880x2880/fast");

}  // namespace

BENCHMARK_MAIN();
