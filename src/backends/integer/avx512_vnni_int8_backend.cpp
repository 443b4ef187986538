// The avx512_vnni_int8 backend (named avx512_vnni before; the name now says its activation
// format, as avx_vnni_int8's does): int8 activations (per-32 blocks), doubled E2M1 codes as bytes,
// exact int32 block dot products with vpdpbusd, fp32 scale-and-accumulate per block.
#include <memory>

#include "backends/described_backend.hpp"
#include "backends/integer/int8_expert_kernel.hpp"

namespace mxmoe {
namespace {

#if MXMOE_X86_KERNELS
namespace k = int8_kernels;
constexpr int8_backend::Int8Ops kOps{.quantize = &k::int8_block32_quantize__avx512_vnni,
                                     .gemm16 = &k::int8_block32_gemm_16x8__avx512_vnni,
                                     .glu_quantize = &k::int8_block32_glu_quantize__avx512_vnni};
#endif

}  // namespace

namespace backends {

BackendDescription avx512_vnni_int8() {
  BackendDescription b;
  b.name = "avx512_vnni_int8";
  b.former_names = {"avx512_vnni"};
  b.numerics_class = "int8_block32";
  b.peak_class = "int8_vnni_avx512";
  b.description = "AVX-512 VNNI: int8 activations per 32-block, exact int32 block dots (vpdpbusd)";
#if MXMOE_X86_KERNELS
  b.create = &int8_backend::create<kOps>;
#endif
  b.kernels = {KernelIsa::avx512_vnni};
  b.capabilities.activations = {ActivationFormat::int8};
  // Per token and output: the same block order and operations whatever the batch, the
  // expert's token count and the thread count (tests/backends_integer, tests/invariance).
  b.capabilities.batch_invariant_activations = {ActivationFormat::int8};
  // Measured (docs/perf/BACKENDS_INT8.md): ~11 GB/s of packed weights per thread when
  // streaming; ~250 GFLOP/s per thread when many tokens share an expert.
  // Per thread, `mxmoe bench` at 2 threads on gpt-oss-20b (docs/PERFORMANCE.md): 23.4 GB/s
  // at 1 token, 498 GFLOP/s at 512 tokens.
  b.throughput = {.weight_gb_per_s_per_thread = 11.7, .gflop_per_s_per_thread = 250.0};
  return b;
}

}  // namespace backends

}  // namespace mxmoe
