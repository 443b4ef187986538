// The neon_dotprod_int8 backend: the int8 numerics class on aarch64 (Graviton 2/3/4, Grace,
// Ampere Altra: every Neoverse core has the Armv8.2 dot product). int8 activations per
// 32-block, doubled E2M1 codes as signed bytes, exact int32 block dots with sdot by lane, fp32
// scale-and-accumulate per block: the same bits as avx512_vnni, amx_int8 and avx2_int8.
#include <memory>

#include "backends/described_backend.hpp"
#include "backends/integer/int8_expert_kernel.hpp"

namespace mxmoe {
namespace {

#if MXMOE_AARCH64_KERNELS
namespace k = int8_kernels;
constexpr int8_backend::Int8Ops kOps{.quantize = &k::int8_block32_quantize__neon_dotprod,
                                     .gemm16 = &k::int8_block32_gemm_16x4__neon_dotprod,
                                     .glu_quantize = &k::int8_block32_glu_quantize__neon_dotprod};
#endif

}  // namespace

namespace backends {

BackendDescription neon_dotprod_int8() {
  BackendDescription b;
  b.name = "neon_dotprod_int8";
  b.numerics_class = "int8_block32";
  b.peak_class = "int8_sdot_neon";
  b.description =
      "aarch64 Advanced SIMD + dot product: int8 activations per 32-block, exact int32 block "
      "dots (sdot)";
#if MXMOE_AARCH64_KERNELS
  b.create = &int8_backend::create<kOps>;
#endif
  b.kernels = {KernelIsa::neon_dotprod};
  b.capabilities.activations = {ActivationFormat::int8};
  // The int8 class's driver: per token and output the same block order and operations
  // whatever the batch, the expert's token count and the thread count (tests/invariance, run
  // under qemu-user by scripts/cross-aarch64.sh).
  b.capabilities.batch_invariant_activations = {ActivationFormat::int8};
  // Predicted, not measured (no Arm machine here; docs/PERFORMANCE.md "Arm servers"): 32
  // sdot per 16 rows x 32 elements and token, 2 per cycle on Neoverse V1/V2 and N1 at
  // ~2.6-3.0 GHz; weights stream at what one core draws from DRAM (~8-12 GB/s). Set below
  // the x86 int8 rates so a measured machine can only raise them.
  b.throughput = {.weight_gb_per_s_per_thread = 8.0, .gflop_per_s_per_thread = 60.0};
  return b;
}

}  // namespace backends

}  // namespace mxmoe
