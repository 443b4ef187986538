// validate(LayerSpec): every rule a layer's spec must satisfy before any backend looks at it.
// Its weights are checked against it by validate(spec, weights), in validate_weights.cpp.
#include <cmath>
#include <stdexcept>
#include <string>

#include "mxmoe/layer_spec.hpp"

namespace mxmoe {
namespace {

[[noreturn]] void fail(const LayerSpec& s, const std::string& what) {
  throw std::invalid_argument("layer spec '" + s.name + "': " + what);
}

void require_block_multiple(const LayerSpec& s, const char* field, int v) {
  if (v <= 0 || v % 32 != 0 || v > kMaxLayerDim)
    fail(s, std::string(field) + " = " + std::to_string(v) +
                " must be a positive multiple of 32 (the MX block size), at most " +
                std::to_string(kMaxLayerDim));
}

bool uses_scores_with_bias(RoutingMethod m) {
  return m == RoutingMethod::sigmoid_group_topk || m == RoutingMethod::sqrtsoftplus_topk ||
         m == RoutingMethod::softmax_topk;
}

}  // namespace

void validate(const LayerSpec& s) {
  if (s.num_experts <= 0 || s.num_experts > kMaxExperts)
    fail(s, "num_experts = " + std::to_string(s.num_experts) + " must be in [1, " +
                std::to_string(kMaxExperts) + "]");
  if (s.top_k <= 0 || s.top_k > s.num_experts)
    fail(s, "top_k = " + std::to_string(s.top_k) +
                " must be in [1, num_experts = " + std::to_string(s.num_experts) + "]");
  require_block_multiple(s, "hidden", s.hidden);
  require_block_multiple(s, "intermediate", s.intermediate);

  const RoutingParams& r = s.routing_params;
  if (!std::isfinite(r.routed_scaling_factor) || r.routed_scaling_factor <= 0)
    fail(s, "routing_params.routed_scaling_factor must be finite and > 0");
  if (r.selection_bias && !uses_scores_with_bias(s.routing))
    fail(s,
         "routing_params.selection_bias is only used by sigmoid_group_topk, "
         "sqrtsoftplus_topk and softmax_topk, not " +
             std::string(to_string(s.routing)));
  if (r.n_group < 1 || s.num_experts % r.n_group != 0)
    fail(s, "routing_params.n_group = " + std::to_string(r.n_group) +
                " must be >= 1 and divide num_experts = " + std::to_string(s.num_experts));
  if (r.topk_group < 1 || r.topk_group > r.n_group)
    fail(s, "routing_params.topk_group = " + std::to_string(r.topk_group) +
                " must be in [1, n_group = " + std::to_string(r.n_group) + "]");
  if (s.routing == RoutingMethod::sigmoid_group_topk) {
    const int eligible = r.topk_group * (s.num_experts / r.n_group);
    if (s.top_k > eligible)
      fail(s, "top_k = " + std::to_string(s.top_k) + " exceeds the " + std::to_string(eligible) +
                  " experts of the topk_group kept groups");
  } else if (r.n_group != 1 || r.topk_group != 1) {
    fail(s, "routing_params.n_group/topk_group apply to sigmoid_group_topk only (must be 1)");
  }

  if (s.routing == RoutingMethod::hash) {
    if (s.vocab < 1 || s.vocab > kMaxVocab)
      fail(s, "vocab = " + std::to_string(s.vocab) + " must lie in [1, " +
                  std::to_string(kMaxVocab) + "] for hash routing (token ids lie in [0, vocab))");
  } else if (s.vocab != 0) {
    fail(s, "vocab = " + std::to_string(s.vocab) + " is only used by hash routing (must be 0)");
  }
  if (s.weight_format != ElementType::mxfp4)
    fail(s, "weight_format = " + std::string(to_string(s.weight_format)) +
                ": routed experts must be mxfp4");

  const ActivationParams& a = s.activation_params;
  if (s.activation == ActivationFn::swiglu_oai && (!std::isfinite(a.alpha) || a.alpha <= 0))
    fail(s, "activation_params.alpha must be finite and > 0");
  if (s.activation != ActivationFn::silu_glu && (!std::isfinite(a.limit) || a.limit <= 0))
    fail(s, "activation_params.limit must be finite and > 0");

  if (s.shared_experts < 0) fail(s, "shared_experts must be >= 0");
  if (s.shared_experts > 0) {
    require_block_multiple(s, "shared_intermediate", s.shared_intermediate);
  } else if (s.shared_intermediate != 0) {
    fail(s, "shared_intermediate = " + std::to_string(s.shared_intermediate) +
                " without shared experts (shared_experts = 0)");
  } else if (s.shared_weight_format != ElementType::mxfp4) {
    fail(s, "shared_weight_format = " + std::string(to_string(s.shared_weight_format)) +
                " without shared experts (leave it mxfp4)");
  }
}

}  // namespace mxmoe
