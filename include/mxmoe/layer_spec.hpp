// LayerSpec: what one MoE layer computes (shapes, routing, activation, biases, layout),
// independent of where its weights come from. Plain data with a JSON round trip.
// The math of each family is in docs/MODELS.md (from ../shared/spec/FORMATS.md §4).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/element_type.hpp"
#include "mxmoe/export.h"

namespace mxmoe {

// Bounds every LayerSpec satisfies (validate()), so no size read from a file can ask for
// unbounded memory or overflow an index: at most kMaxExperts routed experts, and hidden,
// intermediate and shared_intermediate at most kMaxLayerDim (DeepSeek-V3: 256 experts,
// H = 7168).
inline constexpr int kMaxExperts = 65536;
inline constexpr int kMaxLayerDim = 262144;
// Bound on a hash layer's vocabulary (token ids lie in [0, vocab)).
inline constexpr int kMaxVocab = 1 << 24;

enum class Family : std::uint8_t { gpt_oss, mixtral, qwen3_moe, deepseek_v3, deepseek_v4 };

// How router logits become (expert ids, weights) per token.
enum class RoutingMethod : std::uint8_t {
  topk_softmax,        // gpt-oss: top-k of the logits, softmax over those k
  softmax_topk,        // Mixtral / Qwen3-MoE: softmax over all E, top-k, optional renormalise
  sigmoid_group_topk,  // DeepSeek-V3: sigmoid scores, selection bias, grouped top-k
  sqrtsoftplus_topk,   // DeepSeek-V4: sqrt(softplus) scores, selection bias, no groups
  hash,                // DeepSeek-V4's first layers: experts = tid2eid[token id], weights from
                       // the router's scores (RoutingParams::score_function)
};

// The router score of a hash layer (DeepSeek-V4's scoring_func).
enum class ScoreFunction : std::uint8_t { sqrtsoftplus, sigmoid, softmax };

struct MXMOE_API RoutingParams {
  bool renormalize = true;             // divide the chosen k weights by their sum
  bool selection_bias = false;         // DeepSeek: a per-expert bias used for selection only
                                       // (sigmoid_group_topk, sqrtsoftplus_topk, softmax_topk)
  int n_group = 1;                     // sigmoid_group_topk: expert groups
  int topk_group = 1;                  // sigmoid_group_topk: groups kept
  float routed_scaling_factor = 1.0f;  // DeepSeek: multiplies the (normalised) weights
  ScoreFunction score_function = ScoreFunction::sqrtsoftplus;  // hash only
  friend bool operator==(const RoutingParams&, const RoutingParams&) = default;
};

// The expert's nonlinearity on (gate, up).
enum class ActivationFn : std::uint8_t {
  swiglu_oai,      // gpt-oss: g=min(g,limit), u=clamp(u,-limit,limit), g*sigmoid(alpha*g)*(u+1)
  silu_glu,        // silu(g)*u
  silu_glu_clamp,  // DeepSeek-V4: g=min(g,limit), u=clamp(u,-limit,limit), silu(g)*u
};

struct MXMOE_API ActivationParams {
  float alpha = 1.702f;  // swiglu_oai only
  float limit = 7.0f;    // swiglu_oai and silu_glu_clamp
  friend bool operator==(const ActivationParams&, const ActivationParams&) = default;
};

// Rows of the first projection W1 [2I, H]: gate and up interleaved (even rows gate, odd
// rows up, as gpt-oss stores them) or as two halves (rows 0..I-1 gate, I..2I-1 up).
enum class GateUpLayout : std::uint8_t { interleaved, halves };

struct MXMOE_API LayerSpec {
  std::string name;  // preset or model name, for reports
  Family family = Family::gpt_oss;
  int num_experts = 0;   // E routed experts
  int top_k = 0;         // experts per token
  int hidden = 0;        // H (multiple of 32)
  int intermediate = 0;  // I per routed expert (multiple of 32)
  RoutingMethod routing = RoutingMethod::topk_softmax;
  RoutingParams routing_params;
  ActivationFn activation = ActivationFn::swiglu_oai;
  ActivationParams activation_params;
  bool expert_bias = false;  // b1 [E,2I] and b2 [E,H] present
  bool router_bias = false;  // router bias [E] present
  GateUpLayout gate_up_layout = GateUpLayout::interleaved;
  int shared_experts = 0;       // count of always-on experts (weight 1, no bias)
  int shared_intermediate = 0;  // total I of the shared experts (fused into one)
  // How expert weights are stored (mxmoe/element_type.hpp). Routed experts are MXFP4; a shared
  // expert may also be dense (bf16, f32) or FP8 E4M3 with 128 x 128 block scales, as
  // DeepSeek-V4's release stores it.
  ElementType weight_format = ElementType::mxfp4;         // routed experts
  ElementType shared_weight_format = ElementType::mxfp4;  // the shared expert
  int vocab = 0;  // hash routing: token ids lie in [0, vocab) (0 for other methods)

  friend bool operator==(const LayerSpec&, const LayerSpec&) = default;
};

// Throws std::invalid_argument naming the offending field (e.g. top_k > num_experts,
// hidden not a multiple of 32, groups that do not divide the experts, a size over the bounds
// above).
MXMOE_API void validate(const LayerSpec& spec);

// Presets with the real shapes: gpt-oss-20b, gpt-oss-120b, deepseek-v4-flash, deepseek-v3,
// qwen3-30b-a3b, mixtral-8x7b; and tiny (the gpt-oss math at E=8, top-2, H=I=256) for quick
// tries. Throws std::invalid_argument listing the valid names.
MXMOE_API LayerSpec preset(std::string_view name);
MXMOE_API std::vector<std::string> preset_names();

MXMOE_API std::string_view to_string(Family) noexcept;
MXMOE_API std::string_view to_string(RoutingMethod) noexcept;
MXMOE_API std::string_view to_string(ActivationFn) noexcept;
MXMOE_API std::string_view to_string(GateUpLayout) noexcept;
MXMOE_API std::string_view to_string(ScoreFunction) noexcept;
// Inverse of to_string; throw std::invalid_argument listing the valid names.
MXMOE_API Family parse_family(std::string_view);
MXMOE_API RoutingMethod parse_routing_method(std::string_view);
MXMOE_API ActivationFn parse_activation_fn(std::string_view);
MXMOE_API GateUpLayout parse_gate_up_layout(std::string_view);
// parse_element_type(text, "weight format"): the names of to_string(ElementType).
MXMOE_API ElementType parse_weight_format(std::string_view);
MXMOE_API ScoreFunction parse_score_function(std::string_view);

// New sizes for a layer spec; 0 keeps the spec's own.
struct MXMOE_API LayerResize {
  int experts = 0, top_k = 0, hidden = 0, intermediate = 0;
};

// SPEC with the sizes of RESIZE. The shared experts keep their count and take the new
// intermediate size each; DeepSeek-V3's expert groups fall back to one group when the new
// expert count does not divide into them. Throws std::invalid_argument (from validate())
// naming the field when the result is not a valid layer.
MXMOE_API LayerSpec resize(LayerSpec spec, const LayerResize& resize);

MXMOE_API std::string to_json(const LayerSpec&);  // pretty JSON text
// Strict: unknown/missing fields, numbers out of range and a spec validate() refuses throw
// std::invalid_argument.
MXMOE_API LayerSpec layer_spec_from_json(std::string_view);

}  // namespace mxmoe
