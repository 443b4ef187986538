// The neon_int16 backend: bf16 activations on every aarch64 CPU (baseline Advanced SIMD, so
// also cores without the dot product). The int16 class of avx2_int16, the same bits: each
// token's bf16 values as int16 with one power-of-two scale per 32-block, exact int32 block
// dots (smlal), each block entering a float32 fma chain once (int16_kernels.hpp).
#include <memory>

#include "backends/described_backend.hpp"
#include "backends/integer/int16_kernels.hpp"
#include "backends/integer/int8_expert_kernel.hpp"

namespace mxmoe {
namespace {

#if MXMOE_AARCH64_KERNELS
namespace k = int16_kernels;
constexpr int8_backend::Int16Ops kOps{.quantize = &k::int16_block32_quantize__neon,
                                      .gemm16 = &k::int16_block32_gemm_16x4__neon,
                                      .glu_quantize = &k::int16_block32_glu_quantize__neon};
#endif

}  // namespace

namespace backends {

BackendDescription neon_int16() {
  BackendDescription b;
  b.name = "neon_int16";
  b.numerics_class = "int16_block32";
  b.peak_class = "int16_smlal_neon";
  b.description =
      "aarch64 Advanced SIMD: bf16 activations as int16 per 32-block (power-of-two scale), "
      "exact int32 block dots (smlal)";
#if MXMOE_AARCH64_KERNELS
  b.create = &int8_backend::create<kOps>;
#endif
  b.kernels = {KernelIsa::neon};
  b.capabilities.activations = {ActivationFormat::bf16};
  // As avx2_int16: the quantizer reads only the token's block, the dots are exact and the
  // epilogue runs blocks in order on every tile size (tests/invariance under qemu-user).
  b.capabilities.batch_invariant_activations = {ActivationFormat::bf16};
  // Predicted, not measured (docs/PERFORMANCE.md "Arm servers"): 128 smlal per 16 rows x 32
  // elements and token, about 4x the sdot path's instructions.
  b.throughput = {.weight_gb_per_s_per_thread = 6.0, .gflop_per_s_per_thread = 20.0};
  return b;
}

}  // namespace backends

}  // namespace mxmoe
