// config.json -> DecoderConfig (decoder_config.hpp). Field names follow the published
// configs and transformers 5.24's config classes (GptOssConfig, Qwen3MoeConfig,
// MixtralConfig), defaults included, so a config.json that omits a field reads as
// transformers reads it.
#include "llm/decoder_config.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "base/json.hpp"
#include "base/printable.hpp"
#include "mxmoe/errors.hpp"

namespace mxmoe::llm {

namespace {

using json::Json;

constexpr int kMaxDim = 1 << 20;

class Reader {
 public:
  Reader(const Json& j, std::string label) : j_(j), label_(std::move(label)) {}

  [[noreturn]] void fail(std::string_view key, std::string_view why) const {
    throw LoadError(fmt::format("{}: field '{}': {}", label_, key, why));
  }
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  int integer(const char* key, int lo, int hi) const {
    try {
      return static_cast<int>(json::get_integer(j_, label_, key, lo, hi));
    } catch (const std::invalid_argument& e) {
      throw LoadError(e.what());
    }
  }
  int integer_or(const char* key, int fallback, int lo, int hi) const {
    return has(key) ? integer(key, lo, hi) : fallback;
  }
  double number_or(const char* key, double fallback, double lo, double hi) const {
    return has(key) ? number(j_.at(key), key, lo, hi) : fallback;
  }
  double number(const Json& v, std::string_view key, double lo, double hi) const {
    if (!v.is_number()) fail(key, "expected a number");
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < lo || d > hi)
      fail(key, fmt::format("{} is outside [{}, {}]", d, lo, hi));
    return d;
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_boolean()) fail(key, "expected true or false");
    return j_.at(key).get<bool>();
  }
  const Json& json() const { return j_; }
  const std::string& label() const { return label_; }

 private:
  const Json& j_;
  std::string label_;
};

// eos_token_id: an integer, a list of integers, or null.
void add_ids(const Reader& r, const Json& v, const char* key, int vocab,
             std::vector<std::int32_t>& out) {
  auto add = [&](const Json& x) {
    if (!x.is_number_integer()) r.fail(key, "expected a token id or a list of them");
    const auto id = x.get<std::int64_t>();
    if (id < 0 || id >= vocab)
      r.fail(key, fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab));
    if (std::find(out.begin(), out.end(), id) == out.end())
      out.push_back(static_cast<std::int32_t>(id));
  };
  if (v.is_null()) return;
  if (v.is_array()) {
    if (v.size() > 1024) r.fail(key, "more than 1024 ids");
    for (const Json& x : v) add(x);
  } else {
    add(v);
  }
}

RopeConfig parse_rope(const Reader& r, int head_dim) {
  RopeConfig rope;
  // transformers 5 writes rope_parameters (with rope_theta inside); the published configs
  // rope_scaling (null or an object) beside rope_theta.
  const Json* params = nullptr;
  const char* where = "rope_parameters";
  if (r.has("rope_parameters")) {
    params = &r.json().at("rope_parameters");
  } else if (r.has("rope_scaling")) {
    params = &r.json().at("rope_scaling");
    where = "rope_scaling";
  }
  rope.theta = r.number_or("rope_theta", rope.theta, 1.0, 1e12);
  if (params == nullptr) return rope;
  if (!params->is_object()) r.fail(where, "expected an object");
  Reader p(*params, r.label());
  auto field = [&](const char* k) { return std::string(where) + "." + k; };
  if (params->contains("rope_theta"))
    rope.theta = p.number(params->at("rope_theta"), field("rope_theta"), 1.0, 1e12);
  std::string type = "default";
  for (const char* k : {"rope_type", "type"})
    if (p.has(k)) {
      if (!params->at(k).is_string()) r.fail(field(k), "expected a string");
      type = params->at(k).get<std::string>();
    }
  if (type == "default") {
    rope.type = "default";
  } else if (type == "yarn") {
    rope.type = "yarn";
    auto num = [&](const char* k, double fallback, double lo, double hi) {
      return p.has(k) ? p.number(params->at(k), field(k), lo, hi) : fallback;
    };
    rope.factor = num("factor", 1.0, 1.0, 1e6);
    rope.beta_fast = num("beta_fast", 32.0, 0.0, 1e6);
    rope.beta_slow = num("beta_slow", 1.0, 0.0, 1e6);
    rope.attention_factor = num("attention_factor", 0.0, 0.0, 1e3);
    rope.original_max_positions = num("original_max_position_embeddings", 0.0, 1.0, 1e9);
    if (p.has("truncate")) {
      if (!params->at("truncate").is_boolean()) r.fail(field("truncate"), "expected true or false");
      rope.truncate = params->at("truncate").get<bool>();
    }
    for (const char* k : {"mscale", "mscale_all_dim"})
      if (p.has(k) && params->at(k).is_number() && params->at(k).get<double>() != 0.0)
        r.fail(field(k), "YaRN with mscale (DeepSeek's form) is not supported");
  } else {
    r.fail(field("rope_type"),
           fmt::format("'{}' is not supported (supported: default, yarn)", printable(type)));
  }
  if (p.has("partial_rotary_factor") &&
      p.number(params->at("partial_rotary_factor"), field("partial_rotary_factor"), 0, 1) != 1.0)
    r.fail(field("partial_rotary_factor"), "partial rotary embeddings are not supported");
  (void)head_dim;
  return rope;
}

// layer_types: "sliding_attention" / "full_attention" per layer.
std::vector<int> windows_from_layer_types(const Reader& r, int layers, int window) {
  const Json& types = r.json().at("layer_types");
  if (!types.is_array() || static_cast<int>(types.size()) != layers)
    r.fail("layer_types", fmt::format("expected a list of {} layer types", layers));
  std::vector<int> out;
  for (const Json& t : types) {
    const std::string s = t.is_string() ? t.get<std::string>() : std::string("?");
    if (s == "sliding_attention") {
      if (window <= 0) r.fail("sliding_window", "a sliding_attention layer needs a window");
      out.push_back(window);
    } else if (s == "full_attention") {
      out.push_back(0);
    } else {
      r.fail("layer_types", fmt::format("unknown layer type '{}'", printable(s)));
    }
  }
  return out;
}

}  // namespace

std::string_view to_string(DecoderFamily f) noexcept {
  switch (f) {
    case DecoderFamily::gpt_oss:
      return "gpt_oss";
    case DecoderFamily::qwen3_moe:
      return "qwen3_moe";
    case DecoderFamily::mixtral:
      return "mixtral";
  }
  return "?";
}

DecoderConfig parse_decoder_config(std::string_view config_json, const std::string& label) {
  const Json j = json::parse_strict<LoadError>(config_json, label);
  if (!j.is_object()) throw LoadError(label + ": expected a JSON object");
  const Reader r(j, label);
  DecoderConfig c;
  if (!r.has("model_type") || !j.at("model_type").is_string())
    r.fail("model_type", "missing (a whole model needs its family)");
  c.model_type = j.at("model_type").get<std::string>();
  if (c.model_type == "gpt_oss") {
    c.family = DecoderFamily::gpt_oss;
  } else if (c.model_type == "qwen3_moe") {
    c.family = DecoderFamily::qwen3_moe;
  } else if (c.model_type == "mixtral") {
    c.family = DecoderFamily::mixtral;
  } else if (c.model_type == "deepseek_v3" || c.model_type == "deepseek_v4") {
    r.fail("model_type",
           fmt::format("'{}': whole-model runs need its attention (multi-head latent attention{}), "
                       "which mxmoe does not implement yet; its MoE layers run through the layer "
                       "API (mxmoe run --model DIR --layer N)",
                       c.model_type,
                       c.model_type == "deepseek_v4" ? ", compressed sparse attention, hyper-connections"
                                                     : ""));
  } else {
    r.fail("model_type", fmt::format("'{}' is not a family mxmoe runs whole (gpt_oss, qwen3_moe, "
                                     "mixtral)",
                                     printable(c.model_type)));
  }
  c.layers = r.integer("num_hidden_layers", 1, 16384);
  c.hidden = r.integer("hidden_size", 1, kMaxDim);
  c.vocab = r.integer("vocab_size", 1, 1 << 24);
  c.heads = r.integer("num_attention_heads", 1, 4096);
  c.kv_heads = r.integer_or("num_key_value_heads", c.heads, 1, 4096);
  if (c.heads % c.kv_heads != 0)
    r.fail("num_key_value_heads", fmt::format("{} does not divide num_attention_heads {}",
                                              c.kv_heads, c.heads));
  c.head_dim = r.integer_or("head_dim", c.hidden / c.heads, 2, 4096);
  if (c.head_dim % 2 != 0) r.fail("head_dim", "must be even (RoPE rotates pairs)");
  c.max_positions = r.integer_or("max_position_embeddings", 4096, 1, 1 << 30);
  c.rms_eps = r.number_or("rms_norm_eps", 1e-6, 0.0, 1.0);
  c.tie_word_embeddings = r.boolean_or("tie_word_embeddings", false);
  c.rope = parse_rope(r, c.head_dim);
  c.window.assign(static_cast<std::size_t>(c.layers), 0);
  c.moe.assign(static_cast<std::size_t>(c.layers), true);

  const int window = r.integer_or("sliding_window", 0, 0, 1 << 30);
  switch (c.family) {
    case DecoderFamily::gpt_oss:
      c.attention_bias = r.boolean_or("attention_bias", true);
      c.sinks = true;
      if (r.has("layer_types")) c.window = windows_from_layer_types(r, c.layers, window);
      else
        for (int l = 0; l < c.layers; ++l) c.window[static_cast<std::size_t>(l)] = l % 2 == 0 ? window : 0;
      break;
    case DecoderFamily::qwen3_moe: {
      c.attention_bias = r.boolean_or("attention_bias", false);
      c.qk_norm = true;
      if (r.boolean_or("use_sliding_window", false))
        r.fail("use_sliding_window", "Qwen3's sliding-window variant is not supported");
      c.dense_intermediate = r.integer_or("intermediate_size", 0, 0, kMaxDim);
      const int step = r.integer_or("decoder_sparse_step", 1, 1, 16384);
      const int experts = r.integer_or("num_experts", r.integer_or("num_local_experts", 0, 0, 1 << 20), 0, 1 << 20);
      std::vector<bool> dense_only(static_cast<std::size_t>(c.layers), false);
      if (r.has("mlp_only_layers")) {
        const Json& only = j.at("mlp_only_layers");
        if (!only.is_array()) r.fail("mlp_only_layers", "expected a list of layer indices");
        for (const Json& v : only) {
          if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= c.layers)
            r.fail("mlp_only_layers", fmt::format("expected layer indices in [0, {})", c.layers));
          dense_only[v.get<std::size_t>()] = true;
        }
      }
      for (int l = 0; l < c.layers; ++l)
        c.moe[static_cast<std::size_t>(l)] =
            !dense_only[static_cast<std::size_t>(l)] && experts > 0 && (l + 1) % step == 0;
      if (std::find(c.moe.begin(), c.moe.end(), false) != c.moe.end() && c.dense_intermediate == 0)
        r.fail("intermediate_size", "a dense MLP layer needs intermediate_size");
      break;
    }
    case DecoderFamily::mixtral:
      c.attention_bias = false;
      c.window.assign(static_cast<std::size_t>(c.layers), window);
      break;
  }
  if (r.has("eos_token_id")) add_ids(r, j.at("eos_token_id"), "eos_token_id", c.vocab, c.eos_ids);
  if (r.has("bos_token_id")) c.bos_id = r.integer("bos_token_id", 0, c.vocab - 1);
  return c;
}

void add_generation_config(DecoderConfig& config, std::string_view generation_json,
                           const std::string& label) {
  const Json j = json::parse_strict<LoadError>(generation_json, label);
  if (!j.is_object()) throw LoadError(label + ": expected a JSON object");
  const Reader r(j, label);
  if (r.has("eos_token_id")) add_ids(r, j.at("eos_token_id"), "eos_token_id", config.vocab, config.eos_ids);
}

}  // namespace mxmoe::llm
