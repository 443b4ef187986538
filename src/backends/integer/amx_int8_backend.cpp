// The amx_int8 backend: the avx512_vnni numerics with AMX tiles (TDPBSSD, K = one 32-block)
// for every expert with at least 16 slots (all its chunks, a partial last one included);
// experts with fewer slots use the VNNI kernel. Both paths give identical bits, so switching
// by batch size keeps batch invariance.
#include <memory>

#include "backends/described_backend.hpp"
#include "backends/integer/int8_expert_kernel.hpp"
#include "hw/amx_permission.hpp"

namespace mxmoe {
namespace {

#if MXMOE_X86_KERNELS
namespace k = int8_kernels;
// avx512_vnni_int8's table, and AMX tiles for the experts with at least 16 slots.
constexpr int8_backend::AmxInt8Ops kTiles{.tile_config = &k::int8_block32_tile_config__amx_int8,
                                          .tile_release = &k::int8_block32_tile_release__amx_int8,
                                          .decode_group = &k::int8_block32_decode_group__amx_int8,
                                          .gemm16 = &k::int8_block32_gemm_16x16__amx_int8};
constexpr int8_backend::Int8Ops kOps{.quantize = &k::int8_block32_quantize__avx512_vnni,
                                     .gemm16 = &k::int8_block32_gemm_16x8__avx512_vnni,
                                     .glu_quantize = &k::int8_block32_glu_quantize__avx512_vnni,
                                     .amx = &kTiles};

std::unique_ptr<ExpertKernel> create_amx_int8(const Deployment& d, const LayerWeights& weights) {
  hw::require_amx_tile_permission("amx_int8", "avx512_vnni");
  return int8_backend::make_quant_expert_kernel(d.layer, weights, kOps);
}
#endif

}  // namespace

namespace backends {

BackendDescription amx_int8() {
  BackendDescription b;
  b.name = "amx_int8";
  b.numerics_class = "int8_block32";
  b.peak_class = "int8_amx";
  b.description =
      "AMX int8 tiles for experts with >= 16 slots, AVX-512 VNNI below (same bits); int8 "
      "activations per 32-block";
#if MXMOE_X86_KERNELS
  b.create = &create_amx_int8;
#endif
  b.kernels = {KernelIsa::avx512_vnni, KernelIsa::amx_int8};  // VNNI below 16 slots
  b.capabilities.activations = {ActivationFormat::int8};
  b.capabilities.batch_invariant_activations = {ActivationFormat::int8};
  // Decode streams like avx512_vnni; with >= 16 tokens per expert the tiles run, bounded by
  // their fp32 epilogue (docs/perf/BACKENDS_INT8.md).
  // Per thread, `mxmoe bench` at 2 threads on gpt-oss-20b (docs/PERFORMANCE.md): 24.1 GB/s
  // at 1 token (the VNNI path), 820 GFLOP/s at 512 tokens.
  b.throughput = {.weight_gb_per_s_per_thread = 12.0, .gflop_per_s_per_thread = 250.0};
  b.many_tokens_throughput = {.weight_gb_per_s_per_thread = 12.0, .gflop_per_s_per_thread = 410.0};
  b.min_tokens_per_expert = 16;
  return b;
}

}  // namespace backends

}  // namespace mxmoe
