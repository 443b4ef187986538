// The amx_int8 backend: the avx512_vnni numerics with AMX tiles (TDPBSSD, K = one 32-block)
// for every expert with at least 16 slots (all its chunks, a partial last one included);
// experts with fewer slots use the VNNI kernel. Both paths give identical bits, so switching
// by batch size keeps batch invariance.
#include <memory>
#include <stdexcept>
#include <string>

#include "backends/amx/amx_permission.hpp"
#include "backends/avx512_vnni/int8_expert_kernel.hpp"
#include "backends/kernel.hpp"
#include "oracle/capabilities.hpp"
#include "oracle/cost.hpp"

namespace mxmoe {
namespace {

BackendCapabilities amx_int8_capabilities() {
  BackendCapabilities c;
  c.isa = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "amx_tile", "amx_int8"};
  c.activations = {ActivationFormat::int8};
  c.batch_invariant_activations = {ActivationFormat::int8};
  c.activation_fns = {ActivationFn::swiglu_oai, ActivationFn::silu_glu,
                      ActivationFn::silu_glu_clamp};
  c.routing_methods = {RoutingMethod::topk_softmax, RoutingMethod::softmax_topk,
                       RoutingMethod::sigmoid_group_topk, RoutingMethod::sqrtsoftplus_topk};
  c.dim_multiple = 32;
  return c;
}

class AmxInt8Backend final : public Backend {
 public:
  std::string_view name() const noexcept override { return "amx_int8"; }
  std::string_view description() const noexcept override {
    return "AMX int8 tiles for experts with >= 16 slots, AVX-512 VNNI below (same bits); int8 "
           "activations per 32-block";
  }
  std::vector<Rejection> check(const Deployment& d) const override {
    return check_capabilities(amx_int8_capabilities(), d);
  }
  // Decode streams like avx512_vnni; with many tokens per expert the tiles' fp32 epilogue
  // bounds it (docs/perf/BACKENDS_INT8.md). Below 16 tokens per expert it is the VNNI path;
  // the flat rate slightly favours avx512_vnni there only through tie-breaking order.
  double estimate_us(const Deployment& d) const override {
    const bool tiles =
        static_cast<double>(d.request.tokens_hint) * d.layer.top_k >= 16.0 * d.layer.num_experts;
    return roofline_estimate_us(d, Throughput{.weight_gb_per_s_per_thread = 11.0,
                                              .gflop_per_s_per_thread = tiles ? 600.0 : 250.0});
  }
  std::unique_ptr<ExpertKernel> create(const Deployment& d,
                                       const LayerWeights& weights) const override {
    const std::string refused = amx::request_amx_tile_permission();
    if (!refused.empty()) {
      throw std::runtime_error("amx_int8: the OS refused the AMX tile permission (" + refused +
                               "); choose another backend (e.g. avx512_vnni)");
    }
    return int8_backend::make_int8_expert_kernel(d.layer, weights, /*use_amx=*/true);
  }
};

}  // namespace

namespace backends {
const Backend& amx_int8() {
  static const AmxInt8Backend backend;
  return backend;
}
}  // namespace backends

}  // namespace mxmoe
