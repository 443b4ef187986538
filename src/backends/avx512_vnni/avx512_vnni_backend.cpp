// The avx512_vnni backend: int8 activations (per-32 blocks), doubled E2M1 codes as bytes,
// exact int32 block dot products with vpdpbusd, fp32 scale-and-accumulate per block.
#include <memory>

#include "backends/avx512_vnni/int8_expert_kernel.hpp"
#include "backends/kernel.hpp"
#include "oracle/capabilities.hpp"
#include "oracle/cost.hpp"

namespace mxmoe {
namespace {

BackendCapabilities avx512_vnni_capabilities() {
  BackendCapabilities c;
  c.isa = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"};
  c.activations = {ActivationFormat::int8};
  // Per token and output: the same block order and operations whatever the batch, the
  // expert's token count and the thread count (tests/backends_int8, tests/invariance).
  c.batch_invariant_activations = {ActivationFormat::int8};
  c.activation_fns = {ActivationFn::swiglu_oai, ActivationFn::silu_glu,
                      ActivationFn::silu_glu_clamp};
  c.routing_methods = {RoutingMethod::topk_softmax, RoutingMethod::softmax_topk,
                       RoutingMethod::sigmoid_group_topk, RoutingMethod::sqrtsoftplus_topk};
  c.dim_multiple = 32;
  return c;
}

class Avx512VnniBackend final : public Backend {
 public:
  std::string_view name() const noexcept override { return "avx512_vnni"; }
  std::string_view description() const noexcept override {
    return "AVX-512 VNNI: int8 activations per 32-block, exact int32 block dots (vpdpbusd)";
  }
  std::vector<Rejection> check(const Deployment& d) const override {
    return check_capabilities(avx512_vnni_capabilities(), d);
  }
  // Measured on this machine (docs/perf/BACKENDS_INT8.md): ~11 GB/s of packed weights per
  // thread when streaming; ~250 GFLOP/s per thread when many tokens share an expert.
  double estimate_us(const Deployment& d) const override {
    return roofline_estimate_us(
        d, Throughput{.weight_gb_per_s_per_thread = 11.0, .gflop_per_s_per_thread = 250.0});
  }
  std::unique_ptr<ExpertKernel> create(const Deployment& d,
                                       const LayerWeights& weights) const override {
    return int8_backend::make_int8_expert_kernel(d.layer, weights, /*use_amx=*/false);
  }
};

}  // namespace

namespace backends {
const Backend& avx512_vnni() {
  static const Avx512VnniBackend backend;
  return backend;
}
}  // namespace backends

}  // namespace mxmoe
