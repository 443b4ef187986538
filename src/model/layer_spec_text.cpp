// LayerSpec as text: enum names, their parsers, and the strict JSON round trip.
#include <array>
#include <string_view>

#include "base/enum_names.hpp"
#include "model/layer_spec_json.hpp"
#include "mxmoe/layer_spec.hpp"

namespace mxmoe {
namespace {

constexpr std::array<std::string_view, 5> kFamilyNames = {"gpt_oss", "mixtral", "qwen3_moe",
                                                          "deepseek_v3", "deepseek_v4"};
constexpr std::array<std::string_view, 5> kRoutingNames = {
    "topk_softmax", "softmax_topk", "sigmoid_group_topk", "sqrtsoftplus_topk", "hash"};
constexpr std::array<std::string_view, 3> kScoreFunctionNames = {"sqrtsoftplus", "sigmoid",
                                                                 "softmax"};
constexpr std::array<std::string_view, 3> kActivationFnNames = {"swiglu_oai", "silu_glu",
                                                                "silu_glu_clamp"};
constexpr std::array<std::string_view, 2> kGateUpLayoutNames = {"interleaved", "halves"};

using json::get;
using json::Json;

}  // namespace

std::string_view to_string(Family v) noexcept {
  return enum_names::name_of(v, kFamilyNames);
}
std::string_view to_string(RoutingMethod v) noexcept {
  return enum_names::name_of(v, kRoutingNames);
}
std::string_view to_string(ActivationFn v) noexcept {
  return enum_names::name_of(v, kActivationFnNames);
}
std::string_view to_string(GateUpLayout v) noexcept {
  return enum_names::name_of(v, kGateUpLayoutNames);
}
std::string_view to_string(ScoreFunction v) noexcept {
  return enum_names::name_of(v, kScoreFunctionNames);
}

Family parse_family(std::string_view s) {
  return enum_names::parse<Family>(s, kFamilyNames, "model family");
}
RoutingMethod parse_routing_method(std::string_view s) {
  return enum_names::parse<RoutingMethod>(s, kRoutingNames, "routing method");
}
ActivationFn parse_activation_fn(std::string_view s) {
  return enum_names::parse<ActivationFn>(s, kActivationFnNames, "activation function");
}
GateUpLayout parse_gate_up_layout(std::string_view s) {
  return enum_names::parse<GateUpLayout>(s, kGateUpLayoutNames, "gate/up layout");
}
ElementType parse_weight_format(std::string_view s) {
  return parse_element_type(s, "weight format");
}
ScoreFunction parse_score_function(std::string_view s) {
  return enum_names::parse<ScoreFunction>(s, kScoreFunctionNames, "score function");
}

namespace json_io {

Json layer_spec_to_json(const LayerSpec& s) {
  const RoutingParams& r = s.routing_params;
  return Json{
      {"name", s.name},
      {"family", to_string(s.family)},
      {"num_experts", s.num_experts},
      {"top_k", s.top_k},
      {"hidden", s.hidden},
      {"intermediate", s.intermediate},
      {"routing", to_string(s.routing)},
      {"routing_params",
       {{"renormalize", r.renormalize},
        {"selection_bias", r.selection_bias},
        {"n_group", r.n_group},
        {"topk_group", r.topk_group},
        {"routed_scaling_factor", r.routed_scaling_factor},
        {"score_function", to_string(r.score_function)}}},
      {"activation", to_string(s.activation)},
      {"activation_params",
       {{"alpha", s.activation_params.alpha}, {"limit", s.activation_params.limit}}},
      {"expert_bias", s.expert_bias},
      {"router_bias", s.router_bias},
      {"gate_up_layout", to_string(s.gate_up_layout)},
      {"shared_experts", s.shared_experts},
      {"shared_intermediate", s.shared_intermediate},
      {"weight_format", to_string(s.weight_format)},
      {"shared_weight_format", to_string(s.shared_weight_format)},
      {"vocab", s.vocab},
  };
}

LayerSpec layer_spec_from_json(const Json& j) {
  constexpr std::string_view what = "LayerSpec";
  json::expect_keys(j, what,
                    {"name", "family", "num_experts", "top_k", "hidden", "intermediate", "routing",
                     "routing_params", "activation", "activation_params", "expert_bias",
                     "router_bias", "gate_up_layout", "shared_experts", "shared_intermediate",
                     "weight_format", "shared_weight_format", "vocab"});
  LayerSpec s;
  s.name = get<std::string>(j, what, "name");
  s.family = parse_family(get<std::string>(j, what, "family"));
  s.num_experts = static_cast<int>(json::get_integer(j, what, "num_experts", 1, kMaxExperts));
  s.top_k = static_cast<int>(json::get_integer(j, what, "top_k", 1, kMaxExperts));
  s.hidden = static_cast<int>(json::get_integer(j, what, "hidden", 1, kMaxLayerDim));
  s.intermediate = static_cast<int>(json::get_integer(j, what, "intermediate", 1, kMaxLayerDim));
  s.routing = parse_routing_method(get<std::string>(j, what, "routing"));
  {
    const Json& r = j.at("routing_params");
    constexpr std::string_view rw = "LayerSpec.routing_params";
    json::expect_keys(r, rw,
                      {"renormalize", "selection_bias", "n_group", "topk_group",
                       "routed_scaling_factor", "score_function"});
    s.routing_params.renormalize = get<bool>(r, rw, "renormalize");
    s.routing_params.selection_bias = get<bool>(r, rw, "selection_bias");
    s.routing_params.n_group =
        static_cast<int>(json::get_integer(r, rw, "n_group", 1, kMaxExperts));
    s.routing_params.topk_group =
        static_cast<int>(json::get_integer(r, rw, "topk_group", 1, kMaxExperts));
    s.routing_params.routed_scaling_factor = json::get_float(r, rw, "routed_scaling_factor");
    s.routing_params.score_function =
        parse_score_function(get<std::string>(r, rw, "score_function"));
  }
  s.activation = parse_activation_fn(get<std::string>(j, what, "activation"));
  {
    const Json& a = j.at("activation_params");
    constexpr std::string_view aw = "LayerSpec.activation_params";
    json::expect_keys(a, aw, {"alpha", "limit"});
    s.activation_params.alpha = json::get_float(a, aw, "alpha");
    s.activation_params.limit = json::get_float(a, aw, "limit");
  }
  s.expert_bias = get<bool>(j, what, "expert_bias");
  s.router_bias = get<bool>(j, what, "router_bias");
  s.gate_up_layout = parse_gate_up_layout(get<std::string>(j, what, "gate_up_layout"));
  s.shared_experts =
      static_cast<int>(json::get_integer(j, what, "shared_experts", 0, kMaxLayerDim));
  s.shared_intermediate =
      static_cast<int>(json::get_integer(j, what, "shared_intermediate", 0, kMaxLayerDim));
  s.weight_format = parse_weight_format(get<std::string>(j, what, "weight_format"));
  s.shared_weight_format = parse_weight_format(get<std::string>(j, what, "shared_weight_format"));
  s.vocab = static_cast<int>(json::get_integer(j, what, "vocab", 0, kMaxVocab));
  validate(s);  // a replayed deployment is judged only when its layer is one
  return s;
}

}  // namespace json_io

std::string to_json(const LayerSpec& s) {
  return json_io::layer_spec_to_json(s).dump(2);
}

LayerSpec layer_spec_from_json(std::string_view text) {
  return json_io::layer_spec_from_json(json::parse_strict(text, "LayerSpec"));
}

}  // namespace mxmoe
