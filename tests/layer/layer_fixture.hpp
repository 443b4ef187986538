// Small layers of every family and a reference-backend MoeLayer for them.
#pragma once

#include <random>
#include <vector>

#include "mxmoe/layer.hpp"

namespace layer_test {

inline mxmoe::Hardware test_hardware() {
  mxmoe::Hardware hw;
  hw.vendor = "test";
  hw.model = "test";
  hw.logical_cpus = 2;
  hw.source = "test";
  return hw;
}

// The preset's math at a smaller shape.
inline mxmoe::LayerSpec shrink(std::string_view preset, int experts, int top_k, int hidden,
                               int inter) {
  mxmoe::LayerSpec s = mxmoe::preset(preset);
  s.name += " (test shape)";
  s.num_experts = experts;
  s.top_k = top_k;
  s.hidden = hidden;
  s.intermediate = inter;
  if (s.shared_experts > 0) s.shared_intermediate = inter;
  if (s.routing == mxmoe::RoutingMethod::sigmoid_group_topk) {
    s.routing_params.n_group = 4;
    s.routing_params.topk_group = 2;
  }
  return s;
}

inline mxmoe::Selection reference_selection(const mxmoe::LayerSpec& spec,
                                            mxmoe::ActivationFormat format, int threads = 1,
                                            int ep_size = 1, int ep_rank = 0) {
  mxmoe::Selection s;
  s.deployment.layer = spec;
  s.deployment.hardware = test_hardware();
  s.deployment.request.activation = format;
  s.deployment.request.threads = threads;
  s.deployment.request.ep_size = ep_size;
  s.deployment.request.ep_rank = ep_rank;
  s.chosen = "reference";
  s.why = "test";
  return s;
}

// Unit-variance inputs (the transformer's pre-norm makes a layer's input about that size).
inline std::vector<float> random_input(const mxmoe::LayerSpec& spec, std::int64_t tokens,
                                       unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens * spec.hidden));
  for (float& v : x) v = normal(rng);
  return x;
}

}  // namespace layer_test
