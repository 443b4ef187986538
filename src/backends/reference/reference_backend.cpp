// The reference backend: the judge of every other backend (see reference_kernel.hpp).
// Supports every activation format, function and routing method; batch invariant for all
// formats by construction (per-token rounding, fixed reduction order, unsplit reductions).
#include <memory>

#include "backends/kernel.hpp"
#include "backends/reference/reference_kernel.hpp"
#include "oracle/capabilities.hpp"
#include "oracle/cost.hpp"

namespace mxmoe {
namespace {

BackendCapabilities reference_capabilities() {
  BackendCapabilities c;
  c.activations = all_activation_formats();
  c.batch_invariant_activations = all_activation_formats();
  c.activation_fns = {ActivationFn::swiglu_oai, ActivationFn::silu_glu,
                      ActivationFn::silu_glu_clamp};
  c.routing_methods = {RoutingMethod::topk_softmax, RoutingMethod::softmax_topk,
                       RoutingMethod::sigmoid_group_topk, RoutingMethod::sqrtsoftplus_topk};
  c.dim_multiple = 32;
  return c;
}

class ReferenceBackend final : public Backend {
 public:
  std::string_view name() const noexcept override { return "reference"; }
  std::string_view description() const noexcept override {
    return "plain C++ (no SIMD), double accumulation; every format; the judge of the others";
  }
  std::vector<Rejection> check(const Deployment& d) const override {
    return check_capabilities(reference_capabilities(), d);
  }
  // Deliberately slow constants (~1 GFLOP/s per thread, weights read at ~2 GB/s) so any
  // fast backend that supports the deployment ranks ahead of the judge.
  double estimate_us(const Deployment& d) const override {
    return roofline_estimate_us(
        d, Throughput{.weight_gb_per_s_per_thread = 2.0, .gflop_per_s_per_thread = 1.0});
  }
  std::unique_ptr<ExpertKernel> create(const Deployment& d,
                                       const LayerWeights& weights) const override {
    return std::make_unique<reference::ReferenceKernel>(d, weights);
  }
};

}  // namespace

namespace backends {
const Backend& reference() {
  static const ReferenceBackend backend;
  return backend;
}
}  // namespace backends

}  // namespace mxmoe
