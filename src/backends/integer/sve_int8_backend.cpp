// The sve_int8 backend: the int8 numerics class with SVE, vector-length agnostic (Graviton 3
// at 256 bits, Graviton 4 and Grace at 128, A64FX at 512). The quantizer and the GLU of
// neon_dotprod_int8, the block dots with SVE's sdot by lane on VL/32 rows an instruction: the
// same bits as every int8-class backend, at every vector length.
#include <memory>

#include "backends/described_backend.hpp"
#include "backends/integer/int8_expert_kernel.hpp"

namespace mxmoe {
namespace {

#if MXMOE_AARCH64_KERNELS
namespace k = int8_kernels;
// The Advanced SIMD quantizer and GLU, SVE sdot block dots (any vector length).
constexpr int8_backend::Int8Ops kOps{.quantize = &k::int8_block32_quantize__neon_dotprod,
                                     .gemm16 = &k::int8_block32_gemm_16x4__sve,
                                     .glu_quantize = &k::int8_block32_glu_quantize__neon_dotprod};
#endif

}  // namespace

namespace backends {

BackendDescription sve_int8() {
  BackendDescription b;
  b.name = "sve_int8";
  b.numerics_class = "int8_block32";
  b.peak_class = "int8_sdot_sve";
  b.description =
      "aarch64 SVE (any vector length): int8 activations per 32-block, exact int32 block dots "
      "(sdot by lane)";
#if MXMOE_AARCH64_KERNELS
  b.create = &int8_backend::create<kOps>;
#endif
  b.kernels = {KernelIsa::neon_dotprod, KernelIsa::sve};
  b.capabilities.activations = {ActivationFormat::int8};
  // The int8 class's driver (tests/invariance, under qemu-user at several vector lengths).
  b.capabilities.batch_invariant_activations = {ActivationFormat::int8};
  // Predicted, not measured (docs/PERFORMANCE.md "Arm servers"): Neoverse V1 issues two
  // 256-bit SVE dots a cycle where it issues four 128-bit NEON ones, V2 four 128-bit of
  // either, so the rate is neon_dotprod_int8's there; only wider pipes (A64FX: two 512-bit)
  // gain. It ranks after smmla and before sdot where both fit.
  b.throughput = {.weight_gb_per_s_per_thread = 8.0, .gflop_per_s_per_thread = 60.0};
  return b;
}

}  // namespace backends

}  // namespace mxmoe
