#include <stdexcept>
#include <vector>

#include "mxmoe/routing.hpp"

namespace mxmoe {

void route_with_router(const LayerSpec& spec, const LayerWeights& w, const float* x,
                       std::int64_t tokens, std::int32_t* ids, float* combine_weights,
                       const std::int32_t* token_ids) {
  if (w.router_weight.empty())
    throw std::invalid_argument("layer '" + spec.name + "' has no router weights");
  const auto at = [](std::int64_t i) { return static_cast<std::size_t>(i); };
  std::vector<float> logits(at(tokens * spec.num_experts));
  for (std::int64_t t = 0; t < tokens; ++t)
    for (int e = 0; e < spec.num_experts; ++e) {
      double v = w.router_bias.empty() ? 0.0 : static_cast<double>(w.router_bias.at(e));
      for (int h = 0; h < spec.hidden; ++h)
        v += static_cast<double>(w.router_weight.at(std::int64_t{e} * spec.hidden + h)) *
             static_cast<double>(x[at(t * spec.hidden + h)]);
      logits[at(t * spec.num_experts + e)] = static_cast<float>(v);
    }
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
