// The avx512_bf16 backend: bf16 activations, MXFP4 weights decoded to bf16 in registers
// (vpermw lookup with the block scale folded into the table), vdpbf16ps dot products over
// strips of 4 rows x up to 6 tokens. The portable driver is backends/mxfp4_strip.
#include <memory>

#include "backends/avx512_bf16/avx512_bf16_ops.hpp"
#include "backends/kernel.hpp"
#include "backends/mxfp4_strip/strip_kernel.hpp"
#include "oracle/capabilities.hpp"
#include "oracle/cost.hpp"

namespace mxmoe {
namespace {

BackendCapabilities avx512_bf16_capabilities() {
  BackendCapabilities c;
  // The flags kernels/ is compiled with (the compiler may use any of them).
  c.isa = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"};
  c.activations = {ActivationFormat::bf16};
  // Every (row, token) dot product runs the same instructions in the same order whatever
  // the batch and thread count (tests/backends_float and tests/invariance check it).
  c.batch_invariant_activations = {ActivationFormat::bf16};
  c.activation_fns = {ActivationFn::swiglu_oai, ActivationFn::silu_glu,
                      ActivationFn::silu_glu_clamp};
  // Routing happens in the runtime before the kernel; every method is fine.
  c.routing_methods = {RoutingMethod::topk_softmax, RoutingMethod::softmax_topk,
                       RoutingMethod::sigmoid_group_topk, RoutingMethod::sqrtsoftplus_topk};
  c.dim_multiple = 32;
  return c;
}

strip::StripOps avx512_bf16_ops() {
  return strip::StripOps{.order = strip::NibbleOrder::row_words,
                         .element_bytes = 2,
                         .max_tokens = avx512_bf16_kernels::kMaxTokens,
                         .decode = &avx512_bf16_kernels::decode_strip,
                         .dot = &avx512_bf16_kernels::dot_strip,
                         .fused_dot = &avx512_bf16_kernels::fused_dot_strip};
}

class Avx512Bf16Backend final : public Backend {
 public:
  std::string_view name() const noexcept override { return "avx512_bf16"; }
  std::string_view description() const noexcept override {
    return "AVX-512 BF16: MXFP4 decoded to bf16 in registers, vdpbf16ps, bf16 activations";
  }
  std::vector<Rejection> check(const Deployment& d) const override {
    return check_capabilities(avx512_bf16_capabilities(), d);
  }
  // Sustained rates measured with bench_backends_float on the 2-core Sapphire Rapids CI
  // machine (docs/perf/BACKENDS_FLOAT.md).
  double estimate_us(const Deployment& d) const override {
    return roofline_estimate_us(
        d, Throughput{.weight_gb_per_s_per_thread = 10.0, .gflop_per_s_per_thread = 100.0});
  }
  std::unique_ptr<ExpertKernel> create(const Deployment& d,
                                       const LayerWeights& weights) const override {
    return std::make_unique<strip::StripKernel>(d, weights, avx512_bf16_ops());
  }
};

}  // namespace

namespace backends {
const Backend& avx512_bf16() {
  static const Avx512Bf16Backend backend;
  return backend;
}
}  // namespace backends

}  // namespace mxmoe
