// The avx2 backend: f32 or bf16 activations, MXFP4 weights decoded to float in registers
// (byte-shuffle lookup of doubled E2M1 codes, scale folded in), FMA dot products over strips
// of 4 rows x up to 2 tokens. The portable driver is backends/mxfp4_strip.
#include <memory>

#include "backends/avx2/avx2_ops.hpp"
#include "backends/kernel.hpp"
#include "backends/mxfp4_strip/strip_kernel.hpp"
#include "oracle/capabilities.hpp"
#include "oracle/cost.hpp"

namespace mxmoe {
namespace {

BackendCapabilities avx2_capabilities() {
  BackendCapabilities c;
  c.isa = {"avx2", "fma", "f16c"};  // the flags kernels/ is compiled with
  c.activations = {ActivationFormat::f32, ActivationFormat::bf16};
  // Every (row, token) dot product runs the same instructions in the same order whatever
  // the batch and thread count (tests/backends_float and tests/invariance check it).
  c.batch_invariant_activations = {ActivationFormat::f32, ActivationFormat::bf16};
  c.activation_fns = {ActivationFn::swiglu_oai, ActivationFn::silu_glu,
                      ActivationFn::silu_glu_clamp};
  // Routing happens in the runtime before the kernel; every method is fine.
  c.routing_methods = {RoutingMethod::topk_softmax, RoutingMethod::softmax_topk,
                       RoutingMethod::sigmoid_group_topk, RoutingMethod::sqrtsoftplus_topk};
  c.dim_multiple = 32;
  return c;
}

strip::StripOps avx2_ops() {
  return strip::StripOps{.order = strip::NibbleOrder::row_blocks,
                         .element_bytes = 4,
                         .max_tokens = avx2_kernels::kMaxTokens,
                         .decode = &avx2_kernels::decode_strip,
                         .dot = &avx2_kernels::dot_strip};
}

class Avx2Backend final : public Backend {
 public:
  std::string_view name() const noexcept override { return "avx2"; }
  std::string_view description() const noexcept override {
    return "AVX2+FMA: MXFP4 decoded to float in registers, f32/bf16 activations";
  }
  std::vector<Rejection> check(const Deployment& d) const override {
    return check_capabilities(avx2_capabilities(), d);
  }
  // Sustained rates measured with bench_backends_float on the 2-core Sapphire Rapids CI
  // machine (docs/perf/BACKENDS_FLOAT.md): decode-bound when streaming, FMA-bound in cache.
  double estimate_us(const Deployment& d) const override {
    return roofline_estimate_us(
        d, Throughput{.weight_gb_per_s_per_thread = 5.0, .gflop_per_s_per_thread = 40.0});
  }
  std::unique_ptr<ExpertKernel> create(const Deployment& d,
                                       const LayerWeights& weights) const override {
    return std::make_unique<strip::StripKernel>(d, weights, avx2_ops());
  }
};

}  // namespace

namespace backends {
const Backend& avx2() {
  static const Avx2Backend backend;
  return backend;
}
}  // namespace backends

}  // namespace mxmoe
