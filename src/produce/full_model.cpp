#include "produce/full_model.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <stdexcept>

#include "base/byte_level.hpp"
#include "base/json.hpp"
#include "produce/config_writer.hpp"

namespace mxmoe {
namespace {

using json::Json;

std::vector<std::uint64_t> shape_of(std::initializer_list<std::int64_t> d) {
  std::vector<std::uint64_t> out;
  for (const auto v : d) out.push_back(static_cast<std::uint64_t>(v));
  return out;
}

// A special token and its id in the published tokenizer (o200k_harmony for gpt-oss, Qwen2's
// for Qwen3).
struct Special {
  const char* text;
  int published_id;
};
constexpr Special kGptOssSpecial[] = {
    {"<|startoftext|>", 199998}, {"<|endoftext|>", 199999}, {"<|return|>", 200002},
    {"<|constrain|>", 200003},   {"<|channel|>", 200005},   {"<|start|>", 200006},
    {"<|end|>", 200007},         {"<|message|>", 200008},   {"<|call|>", 200012}};
constexpr Special kQwen3Special[] = {
    {"<|endoftext|>", 151643}, {"<|im_start|>", 151644}, {"<|im_end|>", 151645}};

// The published model's sizes and special tokens.
struct Published {
  FullModelSizes sizes;
  std::span<const Special> special;
};

Published published(const LayerSpec& spec) {
  if (spec.family == Family::gpt_oss)
    return {{spec.name == "gpt-oss-120b" ? 36 : 24, 201088, 64, 8, 64}, kGptOssSpecial};
  if (spec.family == Family::qwen3_moe) return {{48, 151936, 32, 4, 128}, kQwen3Special};
  throw std::invalid_argument(fmt::format(
      "generate --full: writes gpt-oss and Qwen3-MoE models (presets gpt-oss-20b, gpt-oss-120b, "
      "tiny, qwen3-30b-a3b), not {}",
      to_string(spec.family)));
}

void check_range(const char* what, int value, int lo, int hi) {
  if (value < lo || value > hi)
    throw std::invalid_argument(
        fmt::format("generate --full: {} must be {}..{}, got {}", what, lo, hi, value));
}

// The ids the special tokens get: the published ones when the vocabulary holds them all, else
// the last ids of the vocabulary, in the same order.
std::vector<int> special_ids(std::span<const Special> special, int vocab) {
  int highest = 0;
  for (const Special& s : special) highest = std::max(highest, s.published_id);
  std::vector<int> ids;
  for (std::size_t k = 0; k < special.size(); ++k)
    ids.push_back(highest < vocab ? special[k].published_id
                                  : vocab - static_cast<int>(special.size() - k));
  return ids;
}

int id_of(std::span<const Special> special, const std::vector<int>& ids, std::string_view text) {
  for (std::size_t k = 0; k < special.size(); ++k)
    if (special[k].text == text) return ids[k];
  throw std::logic_error("no special token " + std::string(text));
}

// The text the stand-in tokenizer learns its merges from: English prose, digits and code,
// enough for frequent words and pieces to become single tokens.
constexpr std::string_view kMergeText =
    "The model reads the text as tokens and writes the next token. The experts of a layer are "
    "chosen by the router for each token, and the output is the sum of the chosen experts "
    "weighted by the router. This is a small stand-in tokenizer for a generated checkpoint: it "
    "is not the published one, but it is a real byte-level BPE with merges, so that a prompt "
    "becomes fewer tokens than bytes. The quick brown fox jumps over the lazy dog. Hello, "
    "world! What is the answer? It is 42, and 2026-12-01 is a date. def forward(self, x): "
    "return self.down(self.act(self.gate(x)) * self.up(x)) # the expert's feed-forward\n"
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n";

// Merges learned from kMergeText, at most MAX: words are split at spaces (a space starts the
// next word), each merge the most frequent pair of adjacent tokens, ties to the smaller pair
// of texts, so the same merges come out on every machine. Returns the merges as pairs of
// tokens' bytes, in rank order.
std::vector<std::pair<std::string, std::string>> learn_merges(std::size_t max) {
  std::map<std::vector<std::string>, int> words;
  std::size_t begin = 0;
  for (std::size_t i = 1; i <= kMergeText.size(); ++i) {
    if (i == kMergeText.size() || kMergeText[i] == ' ') {
      std::vector<std::string> bytes;
      for (const char c : kMergeText.substr(begin, i - begin)) bytes.emplace_back(1, c);
      ++words[bytes];
      begin = i;
    }
  }
  std::vector<std::pair<std::string, std::string>> merges;
  while (merges.size() < max) {
    std::map<std::pair<std::string, std::string>, int> pairs;
    for (const auto& [word, count] : words)
      for (std::size_t k = 0; k + 1 < word.size(); ++k) pairs[{word[k], word[k + 1]}] += count;
    const auto best = std::max_element(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) {
      return a.second < b.second;  // the first of equals (the smallest pair) wins
    });
    if (best == pairs.end() || best->second < 2) break;
    merges.push_back(best->first);
    std::map<std::vector<std::string>, int> next;
    for (const auto& [word, count] : words) {
      std::vector<std::string> merged;
      for (std::size_t k = 0; k < word.size(); ++k) {
        if (k + 1 < word.size() && word[k] == best->first.first && word[k + 1] == best->first.second) {
          merged.push_back(word[k] + word[k + 1]);
          ++k;
        } else {
          merged.push_back(word[k]);
        }
      }
      next[merged] += count;
    }
    words = std::move(next);
  }
  return merges;
}

// The pre-tokenizer patterns of the published tokenizers: o200k's (gpt-oss) and Qwen2's.
constexpr const char* kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A byte-level BPE in the family's published form (gpt-oss: o200k's Split then ByteLevel;
// Qwen: NFC, Qwen2's Split, ByteLevel): the 256 byte tokens, merges learned from
// kMergeText as far as the ids below the special tokens allow, the special tokens at their
// ids. Every text encodes and decodes back.
std::string tokenizer_json(Family family, std::span<const Special> special, const std::vector<int>& ids,
                           int vocab_size) {
  const std::array<std::string, 256> alphabet = byte_level::characters();
  auto spelled = [&](const std::string& bytes) {
    std::string out;
    for (const char c : bytes) out += alphabet[static_cast<unsigned char>(c)];
    return out;
  };
  Json vocab = Json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[alphabet[b]] = b;
  int free_ids = vocab_size - static_cast<int>(special.size());
  for (const int id : ids) free_ids = std::min(free_ids, id);
  Json merges = Json::array();
  int next_id = 256;
  for (const auto& [a, b] : learn_merges(static_cast<std::size_t>(std::clamp(free_ids - 256, 0, 400)))) {
    merges.push_back(spelled(a) + " " + spelled(b));
    if (!vocab.contains(spelled(a + b))) vocab[spelled(a + b)] = next_id++;  // ab+c, a+bc
  }
  Json added = Json::array();
  for (std::size_t k = 0; k < special.size(); ++k) {
    vocab[special[k].text] = ids[k];
    added.push_back({{"id", ids[k]},
                     {"content", special[k].text},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const bool gpt_oss = family == Family::gpt_oss;
  const Json pre_tokenizer = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", gpt_oss ? kO200kPattern : kQwen2Pattern}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", gpt_oss}, {"use_regex", false}}}}};
  const Json decoder = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  return Json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", gpt_oss ? Json(nullptr) : Json{{"type", "NFC"}}},
              {"pre_tokenizer", pre_tokenizer},
              {"post_processor", nullptr},
              {"decoder", decoder},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges}}}}
             .dump() +
         "\n";
}

class TensorList {
 public:
  explicit TensorList(std::vector<FullModelTensor>& out) : out_(out) {}
  // A BF16 weight [rows, cols] of variance 1/cols (uniform).
  void linear(const std::string& name, std::int64_t rows, std::int64_t cols) {
    uniform(name, shape_of({rows, cols}),
            static_cast<float>(std::sqrt(3.0 / static_cast<double>(cols))));
  }
  void uniform(const std::string& name, std::vector<std::uint64_t> shape, float amplitude) {
    out_.push_back({name, StDtype::BF16, std::move(shape), TensorFill::uniform, amplitude, 0});
  }
  void ones(const std::string& name, std::int64_t n) {
    out_.push_back({name, StDtype::BF16, shape_of({n}), TensorFill::ones, 0, 0});
  }
  // The gpt-oss MXFP4 pair of E matrices [rows, cols]: _blocks [E, rows, cols/32, 16] and
  // _scales [E, rows, cols/32].
  void mxfp4(const std::string& stem, std::int64_t e, std::int64_t rows, std::int64_t cols) {
    out_.push_back({stem + "_blocks", StDtype::U8, shape_of({e, rows, cols / 32, 16}),
                    TensorFill::random_bytes, 0, 0});
    out_.push_back({stem + "_scales", StDtype::U8, shape_of({e, rows, cols / 32}),
                    TensorFill::mxfp4_scales, 0, cols});
  }

 private:
  std::vector<FullModelTensor>& out_;
};

constexpr float kBiasAmplitude = 0.1f;

void gpt_oss_layer(TensorList& t, const LayerSpec& s, const FullModelSizes& z, int n) {
  const std::string p = fmt::format("model.layers.{}.", n);
  const std::int64_t h = s.hidden, i = s.intermediate, e = s.num_experts;
  const std::int64_t q = std::int64_t{z.attention_heads} * z.head_dim,
                     kv = std::int64_t{z.kv_heads} * z.head_dim;
  t.ones(p + "input_layernorm.weight", h);
  t.linear(p + "self_attn.q_proj.weight", q, h);
  t.uniform(p + "self_attn.q_proj.bias", shape_of({q}), kBiasAmplitude);
  t.linear(p + "self_attn.k_proj.weight", kv, h);
  t.uniform(p + "self_attn.k_proj.bias", shape_of({kv}), kBiasAmplitude);
  t.linear(p + "self_attn.v_proj.weight", kv, h);
  t.uniform(p + "self_attn.v_proj.bias", shape_of({kv}), kBiasAmplitude);
  t.linear(p + "self_attn.o_proj.weight", h, q);
  t.uniform(p + "self_attn.o_proj.bias", shape_of({h}), kBiasAmplitude);
  t.uniform(p + "self_attn.sinks", shape_of({z.attention_heads}), 1.0f);
  t.ones(p + "post_attention_layernorm.weight", h);
  t.linear(p + "mlp.router.weight", e, h);
  t.uniform(p + "mlp.router.bias", shape_of({e}), kBiasAmplitude);
  t.mxfp4(p + "mlp.experts.gate_up_proj", e, 2 * i, h);
  t.uniform(p + "mlp.experts.gate_up_proj_bias", shape_of({e, 2 * i}), kBiasAmplitude);
  t.mxfp4(p + "mlp.experts.down_proj", e, h, i);
  t.uniform(p + "mlp.experts.down_proj_bias", shape_of({e, h}), kBiasAmplitude);
}

void qwen3_layer(TensorList& t, const LayerSpec& s, const FullModelSizes& z, int n) {
  const std::string p = fmt::format("model.layers.{}.", n);
  const std::int64_t h = s.hidden, i = s.intermediate;
  const std::int64_t q = std::int64_t{z.attention_heads} * z.head_dim,
                     kv = std::int64_t{z.kv_heads} * z.head_dim;
  t.ones(p + "input_layernorm.weight", h);
  t.linear(p + "self_attn.q_proj.weight", q, h);
  t.linear(p + "self_attn.k_proj.weight", kv, h);
  t.linear(p + "self_attn.v_proj.weight", kv, h);
  t.linear(p + "self_attn.o_proj.weight", h, q);
  t.ones(p + "self_attn.q_norm.weight", z.head_dim);
  t.ones(p + "self_attn.k_norm.weight", z.head_dim);
  t.ones(p + "post_attention_layernorm.weight", h);
  t.linear(p + "mlp.gate.weight", s.num_experts, h);
  for (int x = 0; x < s.num_experts; ++x) {
    const std::string ex = fmt::format("{}mlp.experts.{}.", p, x);
    t.linear(ex + "gate_proj.weight", i, h);
    t.linear(ex + "up_proj.weight", i, h);
    t.linear(ex + "down_proj.weight", h, i);
  }
}

// config.json: the published model's fields, with the MoE fields of SPEC as model_config_json
// writes them (mxmoe reads those back as SPEC).
std::string config_json(const LayerSpec& s, const FullModelSizes& z, std::span<const Special> sp,
                        const std::vector<int>& ids) {
  Json c = json::parse_strict(model_config_json(s, z.layers), "config.json");
  c["vocab_size"] = z.vocab;
  c["num_attention_heads"] = z.attention_heads;
  c["num_key_value_heads"] = z.kv_heads;
  c["head_dim"] = z.head_dim;
  c["rms_norm_eps"] = s.family == Family::gpt_oss ? 1e-5 : 1e-6;
  c["initializer_range"] = 0.02;
  c["attention_dropout"] = 0.0;
  c["tie_word_embeddings"] = false;
  c["use_cache"] = true;
  c["output_router_logits"] = false;
  if (s.family == Family::gpt_oss) {
    Json types = Json::array();
    for (int n = 0; n < z.layers; ++n)
      types.push_back(n % 2 == 0 ? "sliding_attention" : "full_attention");
    c["attention_bias"] = true;
    c["eos_token_id"] = id_of(sp, ids, "<|return|>");
    c["pad_token_id"] = id_of(sp, ids, "<|endoftext|>");
    c["initial_context_length"] = 4096;
    c["layer_types"] = types;
    c["max_position_embeddings"] = 131072;
    c["rope_scaling"] = {{"beta_fast", 32.0},   {"beta_slow", 1.0},
                         {"factor", 32.0},      {"original_max_position_embeddings", 4096},
                         {"rope_type", "yarn"}, {"truncate", false}};
    c["rope_theta"] = 150000;
    c["router_aux_loss_coef"] = 0.9;
    c["sliding_window"] = 128;
    c["quantization_config"] = {{"modules_to_not_convert",
                                 {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                  "model.embed_tokens", "lm_head"}},
                                {"quant_method", "mxfp4"}};
  } else {
    c.erase("quantization_config");  // BF16 experts, as published: `mxmoe quantize` converts
    c["attention_bias"] = false;
    c["bos_token_id"] = id_of(sp, ids, "<|endoftext|>");
    c["eos_token_id"] = id_of(sp, ids, "<|im_end|>");
    c["intermediate_size"] = 6144;  // the dense MLP's, which no layer has (mlp_only_layers: [])
    c["max_position_embeddings"] = 40960;
    c["max_window_layers"] = z.layers;
    c["rope_scaling"] = nullptr;
    c["rope_theta"] = 1000000.0;
    c["router_aux_loss_coef"] = 0.001;
    c["sliding_window"] = nullptr;
    c["use_sliding_window"] = false;
  }
  return c.dump(2) + "\n";
}

}  // namespace

std::uint64_t FullModelTensor::bytes() const {
  std::uint64_t n = static_cast<std::uint64_t>(dtype_bits(dtype)) / 8;
  for (const std::uint64_t d : shape) n *= d;
  return n;
}

std::uint64_t FullModel::bytes() const {
  std::uint64_t n = 0;
  for (const FullModelTensor& t : tensors) n += t.bytes();
  return n;
}

FullModel full_model(const LayerSpec& spec, const FullModelSizes& sizes) {
  validate(spec);
  const Published pub = published(spec);
  FullModel m;
  FullModelSizes& z = m.sizes;
  const auto pick = [](int given, int published_value) {
    return given != 0 ? given : published_value;
  };
  z.layers = pick(sizes.layers, pub.sizes.layers);
  z.vocab = pick(sizes.vocab, pub.sizes.vocab);
  z.attention_heads = pick(sizes.attention_heads, pub.sizes.attention_heads);
  z.kv_heads = pick(sizes.kv_heads, pub.sizes.kv_heads);
  z.head_dim = pick(sizes.head_dim, pub.sizes.head_dim);
  check_range("layers", z.layers, 1, 4096);
  const int min_vocab = 256 + static_cast<int>(pub.special.size());
  check_range("vocab (256 byte tokens and the special tokens)", z.vocab, min_vocab, kMaxVocab);
  check_range("attention heads", z.attention_heads, 1, 1024);
  check_range("key/value heads", z.kv_heads, 1, z.attention_heads);
  if (z.attention_heads % z.kv_heads != 0)
    throw std::invalid_argument(
        fmt::format("generate --full: {} attention heads do not divide into {} key/value heads",
                    z.attention_heads, z.kv_heads));
  check_range("head dim", z.head_dim, 2, 1024);
  if (z.head_dim % 2 != 0)
    throw std::invalid_argument(fmt::format(
        "generate --full: the head dim must be even (rotary pairs), got {}", z.head_dim));

  const std::vector<int> ids = special_ids(pub.special, z.vocab);
  TensorList t(m.tensors);
  const std::int64_t h = spec.hidden;
  t.uniform("model.embed_tokens.weight", shape_of({z.vocab, h}),
            static_cast<float>(std::sqrt(3.0)));
  for (int n = 0; n < z.layers; ++n) {
    if (spec.family == Family::gpt_oss)
      gpt_oss_layer(t, spec, z, n);
    else
      qwen3_layer(t, spec, z, n);
  }
  t.ones("model.norm.weight", h);
  t.linear("lm_head.weight", z.vocab, h);

  m.config_json = config_json(spec, z, pub.special, ids);
  m.tokenizer_json = tokenizer_json(spec.family, pub.special, ids, z.vocab);
  Json generation, tokenizer_config;
  if (spec.family == Family::gpt_oss) {
    generation = {{"bos_token_id", id_of(pub.special, ids, "<|startoftext|>")},
                  {"do_sample", true},
                  {"eos_token_id",
                   {id_of(pub.special, ids, "<|return|>"), id_of(pub.special, ids, "<|endoftext|>"),
                    id_of(pub.special, ids, "<|call|>")}},
                  {"pad_token_id", id_of(pub.special, ids, "<|endoftext|>")}};
    tokenizer_config = {{"bos_token", "<|startoftext|>"},
                        {"eos_token", "<|return|>"},
                        {"pad_token", "<|endoftext|>"},
                        {"model_max_length", 131072}};
  } else {
    generation = {
        {"bos_token_id", id_of(pub.special, ids, "<|endoftext|>")},
        {"do_sample", true},
        {"eos_token_id",
         {id_of(pub.special, ids, "<|im_end|>"), id_of(pub.special, ids, "<|endoftext|>")}},
        {"pad_token_id", id_of(pub.special, ids, "<|endoftext|>")},
        {"temperature", 0.6},
        {"top_k", 20},
        {"top_p", 0.95}};
    tokenizer_config = {{"bos_token", nullptr},
                        {"eos_token", "<|im_end|>"},
                        {"pad_token", "<|endoftext|>"},
                        {"model_max_length", 131072}};
  }
  tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast";
  tokenizer_config["clean_up_tokenization_spaces"] = false;
  m.generation_config_json = generation.dump(2) + "\n";
  m.tokenizer_config_json = tokenizer_config.dump(2) + "\n";
  return m;
}

}  // namespace mxmoe
