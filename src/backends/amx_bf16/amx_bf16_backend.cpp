// The amx_bf16 backend: bf16 activations, MXFP4 weights decoded to bf16 B tiles with the block
// scale folded in, TDPBF16PS with fp32 accumulators resident in the tiles over the whole K
// loop. One path for every batch size (a decode token is a 16-row tile with one valid row),
// so it is batch invariant. Kernels: kernels/bf16_amx_tiles__amx_bf16.cpp; numerics:
// bf16_amx_kernels.hpp.
#include <memory>

#include "backends/amx_bf16/bf16_expert_kernel.hpp"
#include "backends/described_backend.hpp"
#include "hw/amx_permission.hpp"

namespace mxmoe {
namespace {

#if MXMOE_X86_KERNELS
namespace k = bf16_amx;
constexpr amx_bf16_backend::AmxBf16Ops kOps{
    .tile_config = &k::bf16_amx_tiles_tile_config__amx_bf16,
    .tile_release = &k::bf16_amx_tiles_tile_release__amx_bf16,
    .round_row_to_tiles = &k::bf16_amx_tiles_round_rows__amx_bf16,
    .decode_group = &k::bf16_amx_tiles_decode_group__amx_bf16,
    .gemm_pair = &k::bf16_amx_tiles_gemm_32x32__amx_bf16,
    .glu_to_bf16 = &k::bf16_amx_tiles_glu_to_bf16__amx_bf16};

std::unique_ptr<ExpertKernel> create_amx_bf16(const Deployment& d, const LayerWeights& weights) {
  hw::require_amx_tile_permission("amx_bf16", "avx512_bf16");
  return amx_bf16_backend::make_amx_bf16_kernel(
      d.layer, weights, d.request.activation.value_or(ActivationFormat::bf16), kOps);
}
#endif

}  // namespace

namespace backends {

BackendDescription amx_bf16() {
  BackendDescription b;
  b.name = "amx_bf16";
  b.numerics_class = "bf16_amx_tiles";
  b.peak_class = "bf16_amx";
  b.description =
      "AMX bf16 tiles (TDPBF16PS, fp32 accumulators resident over K), MXFP4 decoded to bf16 "
      "tiles; bf16 or MXFP8 activations";
#if MXMOE_X86_KERNELS
  b.create = &create_amx_bf16;
#endif
  b.kernels = {KernelIsa::amx_bf16};
  // mxfp8 values are bf16 values (format/activation_rounding.hpp), rounded per token like bf16:
  // the same one path, so the same invariance argument (untested on AMX hardware here).
  b.capabilities.activations = {ActivationFormat::bf16, ActivationFormat::mxfp8};
  b.capabilities.batch_invariant_activations = {ActivationFormat::bf16, ActivationFormat::mxfp8};
  // Per thread, from `mxmoe bench` at 2 threads on gpt-oss-20b (docs/PERFORMANCE.md): 18.1
  // GB/s at 1 token, 1,874 GFLOP/s at 512 tokens.
  b.throughput = {.weight_gb_per_s_per_thread = 9.0, .gflop_per_s_per_thread = 930.0};
  return b;
}

}  // namespace backends

}  // namespace mxmoe
