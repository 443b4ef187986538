// resize(): a preset's layer with other sizes (mxmoe/layer_spec.hpp).
#include "mxmoe/layer_spec.hpp"

namespace mxmoe {

LayerSpec resize(LayerSpec spec, const LayerResize& r) {
  if (r.experts > 0) spec.num_experts = r.experts;
  if (r.top_k > 0) spec.top_k = r.top_k;
  if (r.hidden > 0) spec.hidden = r.hidden;
  if (r.intermediate > 0) {
    spec.intermediate = r.intermediate;
    if (spec.shared_experts > 0) spec.shared_intermediate = spec.shared_experts * r.intermediate;
  }
  if (spec.routing == RoutingMethod::sigmoid_group_topk && spec.routing_params.n_group > 0 &&
      spec.num_experts % spec.routing_params.n_group != 0) {
    // Keep DeepSeek-V3's grouping valid for a resized layer: one group of every expert.
    spec.routing_params.n_group = 1;
    spec.routing_params.topk_group = 1;
  }
  validate(spec);
  return spec;
}

}  // namespace mxmoe
