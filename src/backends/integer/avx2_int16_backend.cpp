// The avx2_int16 backend: bf16 activations on AVX2 machines at the speed of integer dots. Each
// token's bf16 values are carried as int16 with one power-of-two scale per 32-block (exact
// when the block spans less than 2^7, otherwise rounded below bf16's own precision), the block
// dots are exact int32 (vpmaddwd), and each block enters a float32 fma chain once. Its own
// numerics class (int16_kernels.hpp); the int8 driver and packing.
#include <memory>

#include "backends/described_backend.hpp"
#include "backends/integer/int16_kernels.hpp"
#include "backends/integer/int8_expert_kernel.hpp"

namespace mxmoe {
namespace {

#if MXMOE_X86_KERNELS
namespace k = int16_kernels;
constexpr int8_backend::Int16Ops kOps{.quantize = &k::int16_block32_quantize__avx2,
                                      .gemm16 = &k::int16_block32_gemm_16x8__avx2,
                                      .glu_quantize = &k::int16_block32_glu_quantize__avx2};
#endif

}  // namespace

namespace backends {

BackendDescription avx2_int16() {
  BackendDescription b;
  b.name = "avx2_int16";
  b.numerics_class = "int16_block32";
  b.peak_class = "int16_madd_avx2";
  b.description =
      "AVX2: bf16 activations as int16 per 32-block (power-of-two scale), exact int32 block "
      "dots (vpmaddwd)";
#if MXMOE_X86_KERNELS
  b.create = &int8_backend::create<kOps>;
#endif
  b.kernels = {KernelIsa::avx2};
  b.capabilities.activations = {ActivationFormat::bf16};
  // Per token: the quantizer reads only the token's block; the dots are exact and the
  // epilogue runs blocks in order on every tile size (tests/backends_integer, tests/invariance).
  b.capabilities.batch_invariant_activations = {ActivationFormat::bf16};
  // Measured here under MXMOE_MAX_ISA=avx2 (docs/perf/BACKENDS_AVX2.md): the kernel alone
  // reads 16.3 GB/s per core from L2 at 1 token (avx2_int8: 23), the layer 74-96% of the DRAM
  // bandwidth at 1 token, 87 GFLOP per CPU-second at 512 tokens. Side by side it is faster
  // than avx2 at every size and slower than avx512_bf16 at every size, so its rates sit
  // between theirs on the oracle's scale.
  b.throughput = {.weight_gb_per_s_per_thread = 8.3, .gflop_per_s_per_thread = 80.0};
  return b;
}

}  // namespace backends

}  // namespace mxmoe
