// config.json -> ModelConfig. See model_config.hpp for the field policy.
#include <fmt/core.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "base/json.hpp"
#include "base/printable.hpp"
#include "model/model_config.hpp"
#include "mxmoe/errors.hpp"

namespace mxmoe {

namespace {

using Json = json::Json;

// Key aliases of a family's config class: transformers' attribute_map (an alias is read and
// written under its canonical key, so transformers 5 writes `num_local_experts` for Qwen3-MoE)
// and the names of the original releases (OpenAI's `experts_per_token`). A field is looked up
// under its canonical key and every alias; two spellings present with different values are an
// error. Sources and the list: docs/CHECKPOINTS.md. To add a family or a name, add a row.
struct KeyAliases {
  const char* canonical;
  std::vector<const char*> aliases;
};

const std::vector<KeyAliases>& aliases_for(std::string_view model_type) {
  static const std::vector<KeyAliases> kNone;
  static const std::vector<std::pair<std::string_view, std::vector<KeyAliases>>> kTable = {
      {"gpt_oss",
       {{"num_local_experts", {"num_experts"}}, {"num_experts_per_tok", {"experts_per_token"}}}},
      {"mixtral", {{"num_local_experts", {"num_experts"}}}},
      {"qwen3_moe", {{"num_experts", {"num_local_experts"}}}},
      {"deepseek_v3",
       {{"n_routed_experts", {"num_local_experts"}},
        {"num_nextn_predict_layers", {"num_mtp_layers"}}}},
      {"deepseek_v4",
       {{"n_routed_experts", {"num_local_experts"}},
        {"moe_intermediate_size", {"intermediate_size"}}}},
  };
  for (const auto& [type, aliases] : kTable)
    if (type == model_type) return aliases;
  return kNone;
}

// Reads typed fields of one JSON object; every error names the field as written.
class Fields {
 public:
  Fields(const Json& object, std::string prefix, std::string label, std::string model_type)
      : obj_(object),
        prefix_(std::move(prefix)),
        label_(std::move(label)),
        model_type_(std::move(model_type)),
        aliases_(aliases_for(model_type_)) {}

  bool has(const char* key) const { return spelling(key) != nullptr; }
  const Json& raw(const char* key) const {
    const char* k = spelling(key);
    if (k == nullptr)
      throw LoadError(fmt::format("{}: missing field '{}'{} (required for model_type {})",
                                  printable(label_), path(key), also_known_as(key),
                                  printable(model_type_)));
    return obj_[k];
  }
  [[noreturn]] void bad(const char* key, const std::string& what) const {
    throw LoadError(fmt::format("{}: field '{}': {}", printable(label_), path(key), what));
  }

  // An integer in [min_value, max_value].
  int integer(const char* key, int min_value, int max_value = kMaxInt) const {
    const Json& v = raw(key);
    // Compared in 64 bits (nlohmann holds non-negative integers as unsigned), so a value that
    // does not fit an int is out of range, never wrapped.
    bool ok = v.is_number_integer();
    if (ok && v.is_number_unsigned())
      ok = v.get<std::uint64_t>() <= static_cast<std::uint64_t>(max_value) &&
           static_cast<std::int64_t>(v.get<std::uint64_t>()) >= min_value;
    else if (ok)
      ok = v.get<std::int64_t>() >= min_value && v.get<std::int64_t>() <= max_value;
    if (!ok)
      bad(key, max_value == kMaxInt
                   ? fmt::format("expected an integer >= {}, got {}", min_value, v.dump())
                   : fmt::format("expected an integer in [{}, {}], got {}", min_value, max_value,
                                 v.dump()));
    return static_cast<int>(v.get<std::int64_t>());
  }
  int integer_or(const char* key, int min_value, int fallback, int max_value = kMaxInt) const {
    return has(key) ? integer(key, min_value, max_value) : fallback;
  }
  float positive_number_or(const char* key, float fallback) const {
    if (!has(key)) return fallback;
    const Json& v = raw(key);
    if (!v.is_number() || !(v.get<double>() > 0) ||
        !(v.get<double>() <= static_cast<double>(std::numeric_limits<float>::max())))
      bad(key, "expected a finite positive number, got " + v.dump());
    return static_cast<float>(v.get<double>());
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!raw(key).is_boolean()) bad(key, "expected true or false, got " + raw(key).dump());
    return raw(key).get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!raw(key).is_string()) bad(key, "expected a string, got " + raw(key).dump());
    return raw(key).get<std::string>();
  }
  // A field that, when present, must hold one of the values mxmoe implements.
  void require_string_in(const char* key, std::initializer_list<const char*> allowed) const {
    if (!has(key)) return;
    const std::string v = string_or(key, "");
    std::string list;
    for (const char* a : allowed) {
      if (v == a) return;
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    bad(key, fmt::format("\"{}\" is not supported by mxmoe (supported: {})", printable(v), list));
  }
  // The field as written in the file (the alias when only the alias is present).
  std::string path(const char* key) const {
    const char* k = spelling(key);
    return prefix_ + (k != nullptr ? k : key);
  }

 private:
  static constexpr int kMaxInt = std::numeric_limits<int>::max();

  const KeyAliases* aliases_of(const char* key) const {
    for (const KeyAliases& a : aliases_)
      if (std::string_view(a.canonical) == key) return &a;
    return nullptr;
  }
  std::string also_known_as(const char* key) const {
    std::string text;
    if (const KeyAliases* a = aliases_of(key))
      for (const char* alias : a->aliases) text += fmt::format(" or '{}{}'", prefix_, alias);
    return text;
  }
  // The key under which KEY is present (canonical first), nullptr when absent. Two spellings
  // with different values are refused: transformers would keep one, silently.
  const char* spelling(const char* key) const {
    const auto present = [&](const char* k) { return obj_.contains(k) && !obj_[k].is_null(); };
    const KeyAliases* a = aliases_of(key);
    const char* found = present(key) ? key : nullptr;
    if (a == nullptr) return found;
    for (const char* alias : a->aliases) {
      if (!present(alias)) continue;
      if (found == nullptr) {
        found = alias;
      } else if (obj_[alias] != obj_[found]) {
        throw LoadError(fmt::format(
            "{}: fields '{}{}' and '{}{}' are two names of one setting and disagree ({} vs {})",
            label_, prefix_, found, prefix_, alias, obj_[found].dump(), obj_[alias].dump()));
      }
    }
    return found;
  }

  const Json& obj_;
  std::string prefix_, label_, model_type_;
  const std::vector<KeyAliases>& aliases_;
};

int read_top_k(const Fields& f) {
  return f.integer("num_experts_per_tok", 1, kMaxExperts);
}
int read_experts(const Fields& f, const char* key) {
  return f.integer(key, 1, kMaxExperts);
}
int read_dim(const Fields& f, const char* key) {
  return f.integer(key, 32, kMaxLayerDim);
}
// transformers' ACT2FN maps "silu" and "swish" to the same function.
void require_silu(const Fields& f) {
  f.require_string_in("hidden_act", {"silu", "swish"});
}

// The keys of a family's layer shape (hidden_size and num_experts_per_tok are every family's).
struct ShapeKeys {
  const char* experts;
  const char* intermediate;
};

// The family and the shape (E, top-k, H, I) of the MoE layer.
void read_shape(const Fields& f, LayerSpec& s, Family family, ShapeKeys keys) {
  s.family = family;
  s.num_experts = read_experts(f, keys.experts);
  s.top_k = read_top_k(f);
  s.hidden = read_dim(f, "hidden_size");
  s.intermediate = read_dim(f, keys.intermediate);
}

void check_shapes(const Fields& f, const LayerSpec& s, ShapeKeys keys) {
  if (s.hidden % 32 != 0)
    f.bad("hidden_size", fmt::format("{} is not a multiple of the MX block (32)", s.hidden));
  if (s.intermediate % 32 != 0)
    f.bad(keys.intermediate,
          fmt::format("{} is not a multiple of the MX block (32)", s.intermediate));
  if (s.top_k > s.num_experts)
    f.bad("num_experts_per_tok", fmt::format("top-k {} exceeds the {} experts ('{}')", s.top_k,
                                             s.num_experts, f.path(keys.experts)));
}

// Mixtral's and Qwen3-MoE's math: softmax over all experts, top-k, silu GLU, halves.
void use_softmax_topk(LayerSpec& s, bool renormalize) {
  s.routing = RoutingMethod::softmax_topk;
  s.routing_params.renormalize = renormalize;
  s.activation = ActivationFn::silu_glu;
  s.gate_up_layout = GateUpLayout::halves;
}

std::vector<std::string> all_moe(int layers) {
  return std::vector<std::string>(static_cast<std::size_t>(layers));
}

// DeepSeek's dense leading layers (first_k_dense_replace) and MoE frequency (moe_layer_freq).
void mark_dense_layers(const Fields& f, ModelConfig& c) {
  const int first_dense = f.integer_or("first_k_dense_replace", 0, 0);
  const int freq = f.integer_or("moe_layer_freq", 1, 1);
  c.non_moe_reason = all_moe(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    auto& why = c.non_moe_reason[static_cast<std::size_t>(i)];
    if (i < first_dense)
      why = fmt::format("dense MLP (first_k_dense_replace {})", first_dense);
    else if (i % freq != 0)
      why = fmt::format("dense MLP (moe_layer_freq {})", freq);
  }
}

// Fields of transformers' GptOssConfig that change the MoE output: num_local_experts,
// num_experts_per_tok, hidden_size, intermediate_size, hidden_act, swiglu_alpha, swiglu_limit.
void parse_gpt_oss(const Fields& f, ModelConfig& c) {
  LayerSpec& s = c.moe;
  const ShapeKeys keys{"num_local_experts", "intermediate_size"};
  read_shape(f, s, Family::gpt_oss, keys);
  require_silu(f);  // gpt-oss writes "silu" for its clamped swiglu
  s.routing = RoutingMethod::topk_softmax;
  s.activation = ActivationFn::swiglu_oai;
  s.activation_params.alpha = f.positive_number_or("swiglu_alpha", 1.702f);
  s.activation_params.limit = f.positive_number_or("swiglu_limit", 7.0f);
  s.expert_bias = true;
  s.router_bias = true;
  s.gate_up_layout = GateUpLayout::interleaved;
  check_shapes(f, s, keys);
  c.non_moe_reason = all_moe(c.num_layers);
}

// MixtralConfig: num_local_experts, num_experts_per_tok, hidden_size, intermediate_size,
// hidden_act. router_jitter_noise acts in training only (transformers applies it when the
// module is training), so it does not change inference.
void parse_mixtral(const Fields& f, ModelConfig& c) {
  LayerSpec& s = c.moe;
  const ShapeKeys keys{"num_local_experts", "intermediate_size"};
  read_shape(f, s, Family::mixtral, keys);
  require_silu(f);
  use_softmax_topk(s, true);
  check_shapes(f, s, keys);
  c.non_moe_reason = all_moe(c.num_layers);
}

// A list of layer indices (Qwen's mlp_only_layers); indices outside the model are refused.
std::set<int> layer_list(const Fields& f, const char* key, int layers) {
  std::set<int> out;
  if (!f.has(key)) return out;
  const Json& list = f.raw(key);
  if (!list.is_array()) f.bad(key, "expected a list of layer indices");
  for (const Json& v : list) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= layers)
      f.bad(key, fmt::format("expected layer indices in [0, {}), got {}", layers, v.dump()));
    out.insert(v.get<int>());
  }
  return out;
}

// Qwen3MoeConfig: num_experts, num_experts_per_tok, hidden_size, moe_intermediate_size,
// hidden_act, norm_topk_prob, decoder_sparse_step, mlp_only_layers.
void parse_qwen3_moe(const Fields& f, ModelConfig& c) {
  LayerSpec& s = c.moe;
  const ShapeKeys keys{"num_experts", "moe_intermediate_size"};
  read_shape(f, s, Family::qwen3_moe, keys);
  require_silu(f);
  use_softmax_topk(s, f.boolean_or("norm_topk_prob", false));  // HF default
  if (f.has("shared_expert_intermediate_size") &&
      f.integer("shared_expert_intermediate_size", 0) != 0)
    f.bad("shared_expert_intermediate_size",
          "a gated shared expert (Qwen2-MoE style) is not supported by mxmoe");
  check_shapes(f, s, keys);

  const int step = f.integer_or("decoder_sparse_step", 1, 1);
  const std::set<int> dense = layer_list(f, "mlp_only_layers", c.num_layers);
  c.non_moe_reason = all_moe(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    if (dense.count(i))
      c.non_moe_reason[static_cast<std::size_t>(i)] = "dense MLP (listed in mlp_only_layers)";
    else if ((i + 1) % step != 0)
      c.non_moe_reason[static_cast<std::size_t>(i)] =
          fmt::format("dense MLP (decoder_sparse_step {})", step);
  }
}

constexpr ShapeKeys kDeepSeekShape{"n_routed_experts", "moe_intermediate_size"};

// DeepSeek's n_shared_experts (FALLBACK when absent): their intermediate size is
// n_shared_experts x moe_intermediate_size, bounded like every layer dimension.
void read_shared_experts(const Fields& f, LayerSpec& s, int fallback) {
  s.shared_experts = f.integer_or("n_shared_experts", 0, fallback, kMaxLayerDim / 32);
  if (std::int64_t{s.shared_experts} * s.intermediate > kMaxLayerDim)
    f.bad("n_shared_experts",
          fmt::format("{} shared experts of {} make an intermediate size over the bound {}",
                      s.shared_experts, s.intermediate, kMaxLayerDim));
  s.shared_intermediate = s.shared_experts * s.intermediate;
}

// DeepseekV3Config (and the original release's config.json): n_routed_experts,
// num_experts_per_tok, hidden_size, moe_intermediate_size, hidden_act, n_shared_experts,
// routed_scaling_factor, norm_topk_prob, n_group, topk_group, scoring_func, topk_method,
// first_k_dense_replace, moe_layer_freq.
void parse_deepseek_v3(const Fields& f, ModelConfig& c) {
  LayerSpec& s = c.moe;
  read_shape(f, s, Family::deepseek_v3, kDeepSeekShape);
  require_silu(f);
  s.routing_params.selection_bias = true;
  s.routing_params.routed_scaling_factor = f.positive_number_or("routed_scaling_factor", 1.0f);
  if (!f.boolean_or("norm_topk_prob", true))
    f.bad("norm_topk_prob", "false is not supported (mxmoe normalises the chosen weights)");
  read_shared_experts(f, s, 0);
  s.gate_up_layout = GateUpLayout::halves;
  f.require_string_in("scoring_func", {"sigmoid"});
  f.require_string_in("topk_method", {"noaux_tc"});
  s.routing = RoutingMethod::sigmoid_group_topk;
  s.routing_params.n_group = f.integer_or("n_group", 1, 1, kMaxExperts);
  s.routing_params.topk_group = f.integer_or("topk_group", 1, 1, kMaxExperts);
  s.activation = ActivationFn::silu_glu;
  if (s.num_experts % s.routing_params.n_group != 0)
    f.bad("n_group", fmt::format("{} groups do not divide the {} experts", s.routing_params.n_group,
                                 s.num_experts));
  if (s.routing_params.topk_group > s.routing_params.n_group)
    f.bad("topk_group", fmt::format("keeps {} of only {} groups", s.routing_params.topk_group,
                                    s.routing_params.n_group));
  check_shapes(f, s, kDeepSeekShape);
  mark_dense_layers(f, c);
}

// DeepSeek-V4 (transformers' DeepseekV4Config and DeepSeek's inference code; the sources are
// cited in docs/MODELS.md). Defaults are the config class's: scoring_func sqrtsoftplus,
// norm_topk_prob true, routed_scaling_factor 1.5, swiglu_limit 10, n_shared_experts 1,
// vocab_size 129280, three hash layers.
void parse_deepseek_v4(const Fields& f, ModelConfig& c) {
  LayerSpec& s = c.moe;
  read_shape(f, s, Family::deepseek_v4, kDeepSeekShape);
  f.require_string_in("hidden_act", {"silu"});
  f.require_string_in("topk_method", {"noaux_tc"});
  f.require_string_in("scoring_func", {"sqrtsoftplus", "sigmoid", "softmax"});
  const std::string scoring = f.string_or("scoring_func", "sqrtsoftplus");
  s.routing_params.selection_bias = true;
  s.routing_params.renormalize = f.boolean_or("norm_topk_prob", true);
  s.routing_params.routed_scaling_factor = f.positive_number_or("routed_scaling_factor", 1.5f);
  if (scoring == "sqrtsoftplus") {
    s.routing = RoutingMethod::sqrtsoftplus_topk;
  } else if (scoring == "sigmoid") {
    s.routing = RoutingMethod::sigmoid_group_topk;  // one group: no group limit in V4
  } else {
    s.routing = RoutingMethod::softmax_topk;
  }
  read_shared_experts(f, s, 1);
  s.gate_up_layout = GateUpLayout::halves;
  // swiglu_limit clamps gate and up of the routed and the shared experts (transformers'
  // DeepseekV4Experts and DeepseekV4MLP); 0 turns the clamp off, as in DeepSeek's code.
  double limit = 10.0;
  if (f.has("swiglu_limit")) {
    const Json& v = f.raw("swiglu_limit");
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      f.bad("swiglu_limit", "expected a finite number >= 0, got " + v.dump());
    limit = v.get<double>();
  }
  if (limit > 0) {
    s.activation = ActivationFn::silu_glu_clamp;
    s.activation_params.limit = static_cast<float>(limit);
  } else {
    s.activation = ActivationFn::silu_glu;
  }
  check_shapes(f, s, kDeepSeekShape);

  LayerSpec& h = c.hash_moe;
  h = s;
  h.routing = RoutingMethod::hash;
  h.routing_params.selection_bias = false;
  h.routing_params.score_function = scoring == "sqrtsoftplus" ? ScoreFunction::sqrtsoftplus
                                    : scoring == "sigmoid"    ? ScoreFunction::sigmoid
                                                              : ScoreFunction::softmax;
  h.vocab = f.integer_or("vocab_size", 1, 129280, kMaxVocab);

  // Which layers are hash-routed: mlp_layer_types wins over the legacy num_hash_layers
  // (transformers folds the latter into the former and does not write it back).
  c.hash_layer.assign(static_cast<std::size_t>(c.num_layers), false);
  if (f.has("mlp_layer_types")) {
    const Json& list = f.raw("mlp_layer_types");
    if (!list.is_array() || list.size() != static_cast<std::size_t>(c.num_layers))
      f.bad("mlp_layer_types",
            fmt::format("expected a list of {} entries (num_hidden_layers), got {}", c.num_layers,
                        list.dump()));
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_string() || (list[i] != "hash_moe" && list[i] != "moe"))
        f.bad("mlp_layer_types",
              fmt::format("entry {} is {}; expected \"hash_moe\" or \"moe\"", i, list[i].dump()));
      c.hash_layer[i] = list[i] == "hash_moe";
    }
  } else {
    const int hash_layers = f.integer_or("num_hash_layers", 0, 3);
    for (int i = 0; i < std::min(hash_layers, c.num_layers); ++i)
      c.hash_layer[static_cast<std::size_t>(i)] = true;
  }
  mark_dense_layers(f, c);
}

// DeepSeek-V4's release: quantization_config in the DeepSeek style (quant_method fp8, fmt
// e4m3, 128 x 128 weight blocks, dynamic activation scales, scale_fmt ue8m0) describes its
// FP8 tensors (the shared expert among them); the routed experts are FP4 (expert_dtype). The
// tensors themselves say what each is (src/io/deepseek_v4_layout.cpp); here the settings
// must be the ones mxmoe reads.
void parse_deepseek_v4_fp8(const Fields& f, const Json& q, const std::string& label,
                           const std::string& field) {
  for (const auto& [key, value] : q.items()) {
    (void)value;
    if (key != "quant_method" && key != "fmt" && key != "activation_scheme" &&
        key != "weight_block_size" && key != "scale_fmt" && key != "modules_to_not_convert")
      throw LoadError(
          fmt::format("{}: field '{}.{}': unknown quantization setting (mxmoe cannot honour it)",
                      label, field, key));
  }
  f.require_string_in("fmt", {"e4m3"});
  f.require_string_in("scale_fmt", {"ue8m0"});
  f.require_string_in("activation_scheme", {"dynamic"});
  if (f.has("weight_block_size") && q["weight_block_size"] != Json::array({128, 128}))
    f.bad("weight_block_size", "expected [128, 128] (the FP8 shared expert's scale blocks), got " +
                                   q["weight_block_size"].dump());
}

void parse_quantization(const Json& q, const std::string& prefix, const std::string& label,
                        const std::string& model_type, ModelConfig& c) {
  const std::string field = prefix + "quantization_config";
  if (!q.is_object())
    throw LoadError(fmt::format("{}: field '{}': expected an object", label, field));
  const Fields f(q, field + ".", label, model_type);
  c.quant_method = f.string_or("quant_method", "");
  if (model_type == "deepseek_v4" && c.quant_method == "fp8") {
    parse_deepseek_v4_fp8(f, q, label, field);
    // The release's shared expert is one of its FP8 tensors (the tensors decide, when read).
    if (c.moe.shared_experts > 0) {
      c.moe.shared_weight_format = ElementType::fp8_e4m3;
      c.hash_moe.shared_weight_format = ElementType::fp8_e4m3;
    }
    return;
  }
  for (const auto& [key, value] : q.items()) {
    (void)value;
    if (key != "quant_method" && key != "modules_to_not_convert" && key != "mxmoe_gate_up_layout" &&
        key != "mxmoe_scale_rule")
      throw LoadError(
          fmt::format("{}: field '{}.{}': unknown quantization setting (mxmoe cannot honour it)",
                      label, field, key));
  }
  if (c.quant_method != "mxfp4")
    f.bad("quant_method", "\"" + c.quant_method +
                              "\" is not supported: mxmoe reads MXFP4 experts; convert BF16/F32 "
                              "experts with `mxmoe quantize`");
  if (f.has("mxmoe_gate_up_layout")) {
    try {
      c.moe.gate_up_layout = parse_gate_up_layout(f.string_or("mxmoe_gate_up_layout", ""));
    } catch (const std::invalid_argument& e) {
      f.bad("mxmoe_gate_up_layout", e.what());
    }
    c.gate_up_layout_recorded = true;
  }
  f.require_string_in("mxmoe_scale_rule", {"floor", "round_up"});
}

}  // namespace

ModelConfig parse_model_config(std::string_view json_text, const std::string& label,
                               const std::string& model_name) {
  const Json root = json::parse_strict<LoadError>(json_text, label);
  if (!root.is_object()) throw LoadError(label + ": config must be a JSON object");
  static const std::set<std::string> kSupported = {"gpt_oss", "mixtral", "qwen3_moe", "deepseek_v3",
                                                   "deepseek_v4"};
  const bool nested = root.contains("text_config");
  if (nested && !root["text_config"].is_object())
    throw LoadError(label + ": field 'text_config': expected an object");
  // transformers' config classes of the five families read the top level only (none nests a
  // text_config; a text_config key is ignored), so a file naming one of them at the top level
  // and holding a text_config too would describe one model to transformers and another to
  // mxmoe: refused naming both. A wrapper's text_config (another model_type at the top) is read.
  if (nested && root.contains("model_type") && root["model_type"].is_string() &&
      kSupported.count(root["model_type"].get<std::string>()))
    throw LoadError(fmt::format(
        "{}: model_type \"{}\" at the top level and a 'text_config' too: transformers reads "
        "{} from the top level only (text_config ignored), mxmoe would read text_config; remove "
        "one of them",
        printable(label), root["model_type"].get<std::string>(),
        root["model_type"].get<std::string>()));
  const Json& obj = nested ? root["text_config"] : root;
  const std::string prefix = nested ? "text_config." : "";

  ModelConfig c;
  const Fields top(root, "", label, "?");
  const Fields inner(obj, prefix, label, "?");
  c.model_type =
      inner.has("model_type") ? inner.string_or("model_type", "") : top.string_or("model_type", "");
  if (c.model_type.empty()) (void)top.raw("model_type");  // throws: missing field
  if (top.has("architectures")) {
    const Json& a = root["architectures"];
    if (a.is_array() && !a.empty() && a[0].is_string()) c.architecture = a[0].get<std::string>();
  }
  if (!kSupported.count(c.model_type))
    inner.bad("model_type", "\"" + printable(c.model_type) +
                                "\" is not supported (supported: gpt_oss, mixtral, qwen3_moe, "
                                "deepseek_v3, deepseek_v4)");
  const Fields f(obj, prefix, label, c.model_type);
  c.moe.name = model_name;
  c.num_layers = f.integer("num_hidden_layers", 1, kMaxModelLayers);
  // DeepSeek's multi-token-prediction layers follow the last (model.layers.{num_hidden_layers}
  // in V3's release); transformers' default is 1.
  if (c.model_type == "deepseek_v3" || c.model_type == "deepseek_v4")
    c.mtp_layers = f.integer_or("num_nextn_predict_layers", 0, 1, kMaxModelLayers);

  if (c.model_type == "gpt_oss") {
    parse_gpt_oss(f, c);
  } else if (c.model_type == "mixtral") {
    parse_mixtral(f, c);
  } else if (c.model_type == "qwen3_moe") {
    parse_qwen3_moe(f, c);
  } else if (c.model_type == "deepseek_v3") {
    parse_deepseek_v3(f, c);
  } else {
    parse_deepseek_v4(f, c);
  }
  if (c.hash_layer.empty()) c.hash_layer.assign(static_cast<std::size_t>(c.num_layers), false);
  if (root.contains("quantization_config"))
    parse_quantization(root["quantization_config"], "", label, c.model_type, c);
  else if (nested && obj.contains("quantization_config"))
    parse_quantization(obj["quantization_config"], prefix, label, c.model_type, c);
  // DeepSeek's expert_dtype: the routed experts of the release are FP4 (MXFP4 blocks); FP8
  // routed experts (the -Base checkpoints) are not MXFP4.
  if (c.model_type == "deepseek_v4") f.require_string_in("expert_dtype", {"fp4"});

  try {
    validate(c.moe);
    if (c.model_type == "deepseek_v4") {
      c.hash_moe.gate_up_layout = c.moe.gate_up_layout;
      c.hash_moe.name = c.moe.name;
      validate(c.hash_moe);
    }
  } catch (const std::invalid_argument& e) {
    throw LoadError(label + ": the layer described is invalid: " + e.what());
  }
  return c;
}

}  // namespace mxmoe
