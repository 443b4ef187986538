// The avx512_bf16 backend: bf16 activations, MXFP4 weights decoded to bf16 in registers
// (vpermw lookup with the block scale folded into the table), vdpbf16ps dot products over
// strips of 4 rows x up to 6 tokens. The portable driver is backends/mxfp4_strip.
#include <memory>

#include "backends/described_backend.hpp"
#include "backends/float/avx512_bf16_ops.hpp"
#include "backends/float/strip_kernel.hpp"

namespace mxmoe {
namespace {

#if MXMOE_X86_KERNELS
std::unique_ptr<ExpertKernel> create_avx512_bf16(const Deployment& d, const LayerWeights& weights) {
  return std::make_unique<strip::StripKernel>(
      d, weights,
      strip::StripOps{
          .order = strip::NibbleOrder::row_words,
          .element_bytes = 2,
          .max_tokens = avx512_bf16_kernels::kMaxTokens,
          .decode = &avx512_bf16_kernels::bf16_dpbf16_strips_decode__avx512_bf16,
          .dot = &avx512_bf16_kernels::bf16_dpbf16_strips_dot_4x6__avx512_bf16,
          .fused_dot = &avx512_bf16_kernels::bf16_dpbf16_strips_fused_dot_4x6__avx512_bf16});
}
#endif

}  // namespace

namespace backends {

BackendDescription avx512_bf16() {
  BackendDescription b;
  b.name = "avx512_bf16";
  b.numerics_class = "bf16_dpbf16_strips";
  b.peak_class = "bf16_dp_avx512";
  b.description =
      "AVX-512 BF16: MXFP4 decoded to bf16 in registers, vdpbf16ps, bf16 or MXFP8 activations";
#if MXMOE_X86_KERNELS
  b.create = &create_avx512_bf16;
#endif
  // The flags kernels/ is compiled with (the compiler may use any of them).
  b.kernels = {KernelIsa::avx512_bf16};
  // MXFP8 activations are E4M3 x 2^k values, which are bf16 values: rounded per token (x) and
  // per slot (a) before the same bf16 kernels (format/activation_rounding.hpp).
  b.capabilities.activations = {ActivationFormat::bf16, ActivationFormat::mxfp8};
  // The fused few-token path and the decode-once path share one accumulation step, so a
  // (row, token) sum is the same whatever the batch and thread count (tests prove it).
  b.capabilities.batch_invariant_activations = {ActivationFormat::bf16, ActivationFormat::mxfp8};
  // Per thread, gpt-oss-20b at 2 threads (docs/PERFORMANCE.md): 16.6-17.1 GB/s at 1 token in
  // the layer loop after the round-the-experts task order (Sapphire Rapids guest), 170
  // GFLOP/s at 512 tokens. Above avx2's 8.0 on purpose: on the Zen 4 guest, in one `mxmoe
  // bench` run, avx512_bf16 moved 2.5x avx2's bytes at 1 token and 2.2x at 8 (issue 15 log).
  b.throughput = {.weight_gb_per_s_per_thread = 8.5, .gflop_per_s_per_thread = 85.0};
  return b;
}

}  // namespace backends

}  // namespace mxmoe
