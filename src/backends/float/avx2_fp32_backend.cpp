// The avx2_fp32 backend (named avx2 before; the name now says what it computes in, as
// neon_fp32's does): f32 or bf16 activations, MXFP4 weights decoded to float (byte-shuffle
// lookup of doubled E2M1 codes), FMA dot products over strips of 4 rows x up to 2 tokens with
// the block scale applied once per block and token. The portable driver is strip_kernel.
#include <memory>

#include "backends/described_backend.hpp"
#include "backends/float/avx2_ops.hpp"
#include "backends/float/strip_kernel.hpp"

namespace mxmoe {
namespace {

#if MXMOE_X86_KERNELS
std::unique_ptr<ExpertKernel> create_avx2(const Deployment& d, const LayerWeights& weights) {
  return std::make_unique<strip::StripKernel>(
      d, weights,
      strip::StripOps{
          .order = strip::NibbleOrder::row_blocks,
          .element_bytes = 4,
          .max_tokens = avx2_kernels::kMaxTokens,
          .decode = &avx2_kernels::fp32_strips_decode__avx2,
          .dot = &avx2_kernels::fp32_strips_dot_4x2__avx2,
          // Both give the same bits; which is faster depends on the core.
          .fused_dot = d.hardware.vendor == "AuthenticAMD"
                           ? &avx2_kernels::fp32_strips_fused_dot_4x2__avx2
                           : &avx2_kernels::fp32_strips_fused_dot_via_memory_4x2__avx2});
}
#endif

}  // namespace

namespace backends {

BackendDescription avx2_fp32() {
  BackendDescription b;
  b.name = "avx2_fp32";
  b.former_names = {"avx2"};
  b.numerics_class = "fp32_strips";
  b.peak_class = "fp32_fma_avx2";
  b.description =
      "AVX2+FMA: MXFP4 decoded to float in registers, scale once per block, f32/bf16 "
      "activations";
#if MXMOE_X86_KERNELS
  b.create = &create_avx2;
#endif
  b.kernels = {KernelIsa::avx2};
  b.capabilities.activations = {ActivationFormat::f32, ActivationFormat::bf16};
  // Every (row, token) dot product runs the same instructions in the same order whatever
  // the batch and thread count (tests/backends_float and tests/invariance prove it).
  b.capabilities.batch_invariant_activations = {ActivationFormat::f32, ActivationFormat::bf16};
  // Measured here under MXMOE_MAX_ISA=avx2 (docs/perf/BACKENDS_AVX2.md): the fused decode
  // reads 8.3 GB/s per core from L2 at 1 token (below a thread's DRAM share: compute binds),
  // 58 GFLOP per CPU-second at 512 tokens.
  b.throughput = {.weight_gb_per_s_per_thread = 8.0, .gflop_per_s_per_thread = 55.0};
  return b;
}

}  // namespace backends

}  // namespace mxmoe
