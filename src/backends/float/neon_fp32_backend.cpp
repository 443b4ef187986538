// The neon_fp32 backend: the float path on every aarch64 CPU (baseline Advanced SIMD): f32 or
// bf16 activations, MXFP4 weights decoded to float, FMA dot products over strips of 4 rows x
// up to 2 tokens with the block scale applied once per block and token: the numerics of the
// avx2 backend, operation for operation, so the same bits. The portable driver is
// strip_kernel.
#include <memory>

#include "backends/described_backend.hpp"
#include "backends/float/neon_ops.hpp"
#include "backends/float/strip_kernel.hpp"

namespace mxmoe {
namespace {

#if MXMOE_AARCH64_KERNELS
std::unique_ptr<ExpertKernel> create_neon_fp32(const Deployment& d, const LayerWeights& weights) {
  return std::make_unique<strip::StripKernel>(
      d, weights,
      strip::StripOps{.order = strip::NibbleOrder::row_blocks,
                      .element_bytes = 4,
                      .max_tokens = neon_kernels::kMaxTokens,
                      .decode = &neon_kernels::fp32_strips_decode__neon,
                      .dot = &neon_kernels::fp32_strips_dot_4x2__neon,
                      .fused_dot = &neon_kernels::fp32_strips_fused_dot_4x2__neon});
}
#endif

}  // namespace

namespace backends {

BackendDescription neon_fp32() {
  BackendDescription b;
  b.name = "neon_fp32";
  b.numerics_class = "fp32_strips";
  b.peak_class = "fp32_fma_neon";
  b.description =
      "aarch64 Advanced SIMD: MXFP4 decoded to float, FMA, scale once per block, f32/bf16 "
      "activations (avx2's bits)";
#if MXMOE_AARCH64_KERNELS
  b.create = &create_neon_fp32;
#endif
  b.kernels = {KernelIsa::neon};
  b.capabilities.activations = {ActivationFormat::f32, ActivationFormat::bf16};
  // avx2's driver and operation order (tests/invariance, under qemu-user).
  b.capabilities.batch_invariant_activations = {ActivationFormat::f32, ActivationFormat::bf16};
  // Predicted, not measured (docs/PERFORMANCE.md "Arm servers"): the fused loop is ~73
  // instructions per row and block at 1 token (decode to float, 10 multiply-adds on 4 lanes),
  // ~83 for 2 tokens: ~2.4 GB/s of packed weights and ~16 GFLOP/s per core at 4 instructions
  // a cycle and 2.6 GHz. The fallback float path: below neon_int16 for bf16, the only fast
  // path for f32 activations on Arm.
  b.throughput = {.weight_gb_per_s_per_thread = 2.0, .gflop_per_s_per_thread = 12.0};
  return b;
}

}  // namespace backends

}  // namespace mxmoe
