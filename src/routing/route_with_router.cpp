#include <stdexcept>
#include <vector>

#include "model/dense_view.hpp"
#include "routing/router_logits.hpp"
#include "routing/routing.hpp"

namespace mxmoe {

void route_with_router(const LayerSpec& spec, const LayerWeights& w, const float* x,
                       std::int64_t tokens, std::int32_t* ids, float* combine_weights,
                       const std::int32_t* token_ids) {
  if (w.router_weight.empty())
    throw std::invalid_argument("layer '" + spec.name + "' has no router weights");
  const auto at = [](std::int64_t i) { return static_cast<std::size_t>(i); };
  // The layer's own logits (same function, same bits), on the calling thread.
  const std::vector<float> weight = to_floats(w.router_weight);
  const std::vector<float> router_bias = to_floats(w.router_bias);
  std::vector<float> logits(at(tokens * spec.num_experts));
  compute_router_logits(weight.data(), router_bias.empty() ? nullptr : router_bias.data(), x,
                        tokens, spec.num_experts, spec.hidden, logits.data(), nullptr);
  std::vector<float> bias;
  if (!w.selection_bias.empty())
    for (int e = 0; e < spec.num_experts; ++e) bias.push_back(w.selection_bias.at(e));
  std::vector<float> scratch(routing_scratch_floats(spec));
  if (spec.routing == RoutingMethod::hash) {
    route_hash(spec, logits.data(), w.token_experts, token_ids, tokens, ids, combine_weights,
               scratch);
    return;
  }
  route_logits(spec, logits.data(), bias.empty() ? nullptr : bias.data(), tokens, ids,
               combine_weights, scratch);
}

}  // namespace mxmoe
