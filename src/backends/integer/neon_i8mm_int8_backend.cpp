// The neon_i8mm_int8 backend: the int8 numerics class on aarch64 cores with the Armv8.6 int8
// matrix multiply (I8MM: Neoverse V1, V2, N2; Graviton 3 and 4, Grace). The quantizer and the
// GLU of neon_dotprod_int8, the block dots with smmla (2 rows x 2 tokens x 8 elements an
// instruction, twice sdot's multiply-adds): the same bits as every int8-class backend.
#include <memory>

#include "backends/described_backend.hpp"
#include "backends/integer/int8_expert_kernel.hpp"

namespace mxmoe {
namespace {

#if MXMOE_AARCH64_KERNELS
namespace k = int8_kernels;
// The Advanced SIMD quantizer and GLU, smmla block dots.
constexpr int8_backend::Int8Ops kOps{.quantize = &k::int8_block32_quantize__neon_dotprod,
                                     .gemm16 = &k::int8_block32_gemm_16x8__neon_i8mm,
                                     .glu_quantize = &k::int8_block32_glu_quantize__neon_dotprod};
#endif

}  // namespace

namespace backends {

BackendDescription neon_i8mm_int8() {
  BackendDescription b;
  b.name = "neon_i8mm_int8";
  b.numerics_class = "int8_block32";
  b.peak_class = "int8_smmla_neon";
  b.description =
      "aarch64 Advanced SIMD + int8 matrix multiply: int8 activations per 32-block, exact "
      "int32 block dots (smmla, 2 rows x 2 tokens)";
#if MXMOE_AARCH64_KERNELS
  b.create = &int8_backend::create<kOps>;
#endif
  b.kernels = {KernelIsa::neon_dotprod, KernelIsa::neon_i8mm};
  b.capabilities.activations = {ActivationFormat::int8};
  // The int8 class's driver (tests/invariance, under qemu-user by scripts/cross-aarch64.sh).
  b.capabilities.batch_invariant_activations = {ActivationFormat::int8};
  // Predicted, not measured (docs/PERFORMANCE.md "Arm servers"): smmla does 32 multiply-adds
  // where sdot does 16, at the same issue rate on Neoverse V1/V2, so compute-bound batches
  // go up to twice neon_dotprod_int8's; decode streams weights at the same DRAM rate.
  b.throughput = {.weight_gb_per_s_per_thread = 8.0, .gflop_per_s_per_thread = 90.0};
  return b;
}

}  // namespace backends

}  // namespace mxmoe
