// The avx_vnni_int8 backend: avx2_int8 with the block dots by VEX vpdpbusd on ymm (AVX-VNNI:
// Alder Lake and later client parts, Zen 5), the same bits as avx2_int8 and avx512_vnni.
#include <memory>

#include "backends/described_backend.hpp"
#include "backends/integer/int8_expert_kernel.hpp"

namespace mxmoe {
namespace {

#if MXMOE_X86_KERNELS
namespace k = int8_kernels;
// The AVX2 quantizer and GLU, VEX vpdpbusd block dots (ymm).
constexpr int8_backend::Int8Ops kOps{.quantize = &k::int8_block32_quantize__avx2,
                                     .gemm16 = &k::int8_block32_gemm_16x8__avx_vnni,
                                     .glu_quantize = &k::int8_block32_glu_quantize__avx2};
#endif

}  // namespace

namespace backends {

BackendDescription avx_vnni_int8() {
  BackendDescription b;
  b.name = "avx_vnni_int8";
  b.numerics_class = "int8_block32";
  b.peak_class = "int8_vnni_avx";
  b.description =
      "AVX-VNNI: int8 activations per 32-block, exact int32 block dots (vpdpbusd on ymm); the "
      "bits of avx512_vnni_int8";
#if MXMOE_X86_KERNELS
  b.create = &int8_backend::create<kOps>;
#endif
  b.kernels = {KernelIsa::avx2, KernelIsa::avx_vnni};  // quantizer and GLU from avx2
  b.capabilities.activations = {ActivationFormat::int8};
  b.capabilities.batch_invariant_activations = {ActivationFormat::int8};
  // Not measured: no CPU here has AVX-VNNI. Decode streams like avx2_int8; the compute rate is
  // avx2_int8's times the llvm-mca (alderlake) ratio of their per-token block loops, 15.6 /
  // 11.6 cycles (docs/perf/BACKENDS_AVX2.md).
  b.throughput = {.weight_gb_per_s_per_thread = 11.0, .gflop_per_s_per_thread = 200.0};
  return b;
}

}  // namespace backends

}  // namespace mxmoe
