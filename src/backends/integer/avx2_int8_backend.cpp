// The avx2_int8 backend: the int8 numerics class of avx512_vnni on AVX2 machines (no AVX-512):
// int8 activations per 32-block, exact int32 block dots by vpmaddubsw + vpmaddwd on ymm, the
// same fp32 epilogue, so the same bits as avx512_vnni and amx_int8.
#include <memory>

#include "backends/described_backend.hpp"
#include "backends/integer/int8_expert_kernel.hpp"

namespace mxmoe {
namespace {

#if MXMOE_X86_KERNELS
namespace k = int8_kernels;
constexpr int8_backend::Int8Ops kOps{.quantize = &k::int8_block32_quantize__avx2,
                                     .gemm16 = &k::int8_block32_gemm_16x8__avx2,
                                     .glu_quantize = &k::int8_block32_glu_quantize__avx2};
#endif

}  // namespace

namespace backends {

BackendDescription avx2_int8() {
  BackendDescription b;
  b.name = "avx2_int8";
  b.numerics_class = "int8_block32";
  b.peak_class = "int8_maddubs_avx2";
  b.description =
      "AVX2: int8 activations per 32-block, exact int32 block dots (vpmaddubsw + vpmaddwd); the "
      "bits of avx512_vnni_int8";
#if MXMOE_X86_KERNELS
  b.create = &int8_backend::create<kOps>;
#endif
  b.kernels = {KernelIsa::avx2};
  b.capabilities.activations = {ActivationFormat::int8};
  // The shared int8 driver and the same per-token operations (tests/backends_integer: bits equal
  // avx512_vnni's; tests/invariance).
  b.capabilities.batch_invariant_activations = {ActivationFormat::int8};
  // Measured here under MXMOE_MAX_ISA=avx2 (docs/perf/BACKENDS_AVX2.md): the kernel alone
  // reads ~23 GB/s per core from L2 at 1 token, twice a thread's share of DRAM, so decode
  // streams like avx512_vnni (11.7); at 512 tokens 178 GFLOP per CPU-second on one thread,
  // rounded down for the load of the machine it was measured on.
  b.throughput = {.weight_gb_per_s_per_thread = 11.0, .gflop_per_s_per_thread = 150.0};
  return b;
}

}  // namespace backends

}  // namespace mxmoe
