// `mxmoe generate`'s pieces: config.json written for a LayerSpec reads back as that spec
// for every family, and a generated checkpoint loads and computes what its in-memory
// weights compute, written whole or not at all.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "io/io_fixtures.hpp"
#include "io/mapped_file.hpp"
#include "io/tensor_set.hpp"
#include "model/model_config.hpp"
#include "mxmoe/model.hpp"
#include "produce/checkpoint_writer.hpp"
#include "produce/config_writer.hpp"
#include "produce/quantize_checkpoint.hpp"
#include "test_runtime.hpp"

namespace mxmoe {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing_io::TempDir;

LayerSpec small(const std::string& name) {
  LayerSpec s = preset(name);
  s.num_experts = 8;
  s.top_k = 2;
  s.hidden = 64;
  s.intermediate = 32;
  if (s.shared_experts > 0) s.shared_intermediate = s.shared_experts * s.intermediate;
  if (s.routing == RoutingMethod::sigmoid_group_topk) {
    s.routing_params.n_group = 4;
    s.routing_params.topk_group = 2;
  }
  return s;
}

TEST(ConfigWriter, EveryPresetReadsBackAsItself) {
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    const LayerSpec spec = preset(name);
    const ModelConfig c = parse_model_config(model_config_json(spec, 3), "test", name);
    EXPECT_EQ(c.spec_of(0), spec);  // a hash preset: every layer is a hash layer
    EXPECT_EQ(c.num_layers, 3);
    for (const std::string& why : c.non_moe_reason) EXPECT_EQ(why, "");
    EXPECT_EQ(parse_model_config(model_config_json(small(name), 1), "test", name).spec_of(0),
              small(name));
  }
}

TEST(ConfigWriter, RefusesWhatTheFamilyCannotExpress) {
  LayerSpec s = small("mixtral-8x7b");
  s.expert_bias = true;
  EXPECT_THROW(model_config_json(s, 1), std::invalid_argument);
  s = small("deepseek-v3");
  s.shared_intermediate = 3 * s.intermediate;  // not n_shared x I
  EXPECT_THROW(model_config_json(s, 1), std::invalid_argument);
  EXPECT_THROW(model_config_json(small("gpt-oss-20b"), 0), std::invalid_argument);
}

TEST(Generate, CheckpointComputesWhatItsWeightsCompute) {
  for (const char* name : {"gpt-oss-20b", "deepseek-v3", "qwen3-30b-a3b"}) {
    SCOPED_TRACE(name);
    TempDir dir;
    const std::string out = dir / "model";
    const LayerSpec spec = small(name);
    GenerateOptions o;
    o.layers = 2;
    o.seed = 40;
    generate_checkpoint(out, spec, o);
    Request r;
    r.activation = ActivationFormat::f32;
    r.forced_backend = "reference";
    Model model(out, probe_hardware(), mxmoe::testing::test_runtime(1), ModelOptions{r, false});
    ASSERT_EQ(model.moe_layers(), (std::vector<int>{0, 1}));
    const std::vector<float> x = testing_io::random_input(7, spec.hidden, 3);
    for (int n = 0; n < 2; ++n) {
      std::vector<float> from_file(x.size()), in_memory(x.size());
      model.layer(n).forward({.tokens = 7, .x = x.data(), .y = from_file.data()});
      const LayerStorage storage = LayerStorage::random(spec, 40 + static_cast<std::uint64_t>(n));
      MoeLayer direct =
          make_layer(spec, storage.weights(), probe_hardware(), r, mxmoe::testing::test_runtime(1));
      direct.forward({.tokens = 7, .x = x.data(), .y = in_memory.data()});
      EXPECT_EQ(std::memcmp(from_file.data(), in_memory.data(), x.size() * sizeof(float)), 0)
          << "layer " << n;
    }
  }
}

TEST(Generate, WritesWholeOrNothing) {
  TempDir dir;
  const std::string out = dir / "model";
  GenerateOptions o;
  o.layers = 2;
  generate_checkpoint(out, small("mixtral-8x7b"), o);
  // A stale file of an earlier mxmoe output (listed in the marker; a file the marker does not
  // list is a user's, which --force refuses: CliLostData).
  std::ofstream(out + "/stale.safetensors") << "x";
  std::ofstream(out + "/.mxmoe-checkpoint", std::ios::app) << "stale.safetensors\n";
  // Without --force an existing directory is refused and left as it was.
  EXPECT_THROW(generate_checkpoint(out, small("mixtral-8x7b"), o), LoadError);
  EXPECT_TRUE(fs::exists(out + "/stale.safetensors"));
  // With --force it is replaced as a whole: nothing of the old one stays.
  o.force = true;
  o.layers = 1;
  generate_checkpoint(out, small("mixtral-8x7b"), o);
  EXPECT_FALSE(fs::exists(out + "/stale.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  // --force replaces a directory only: a file in the way is refused and kept (generate and
  // quantize share the rule, produce::CheckpointDirectoryWriter).
  const std::string file = dir / "a_file";
  std::ofstream(file) << "keep me";
  EXPECT_THROW(generate_checkpoint(file, small("mixtral-8x7b"), o), LoadError);
  std::ifstream kept(file);
  std::string text;
  std::getline(kept, text);
  EXPECT_EQ(text, "keep me");
  // A spec the config cannot express fails before anything is written.
  LayerSpec bad = small("mixtral-8x7b");
  bad.expert_bias = true;
  EXPECT_THROW(generate_checkpoint(dir / "other", bad, o), std::invalid_argument);
  EXPECT_FALSE(fs::exists(dir / "other"));
  for (const auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_THAT(entry.path().filename().string(), ::testing::Not(::testing::HasSubstr(".tmp-")));
}

// The announced size is the written one, for every preset (DeepSeek-V4 with hash layers).
TEST(Generate, AnnouncedBytesAreTheIndexTotal) {
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    TempDir dir;
    GenerateOptions o;
    o.layers = 2;
    if (name == "deepseek-v4-flash") {
      o.hash_layers = 1;
      o.vocab = 77;
    }
    LayerSpec spec = small(name);
    if (spec.routing == RoutingMethod::hash) spec.vocab = 50;
    generate_checkpoint(dir / "m", spec, o);
    const auto index = parse_safetensors_index(
        io::read_text_file(dir / "m/model.safetensors.index.json"), "index");
    EXPECT_EQ(generated_tensor_bytes(spec, o), index.total_size.value());
    EXPECT_EQ(io::TensorSet::open_dir(dir / "m").tensor_bytes(), index.total_size.value());
  }
}

// --- generate --full: the whole published model ------------------------------------------

struct Expected {
  std::string name;
  StDtype dtype;
  std::vector<std::uint64_t> shape;
  bool operator<(const Expected& o) const { return name < o.name; }
  bool operator==(const Expected& o) const {
    return name == o.name && dtype == o.dtype && shape == o.shape;
  }
};

std::vector<std::uint64_t> u(std::initializer_list<std::uint64_t> v) {
  return v;
}

constexpr std::uint64_t kLayers = 2, kH = 64, kI = 32, kE = 4, kHeads = 4, kKv = 2, kHd = 16,
                        kVocab = 300;

GenerateOptions tiny_full() {
  GenerateOptions o;
  o.full = true;
  o.layers = kLayers;
  o.vocab = kVocab;
  o.attention_heads = kHeads;
  o.kv_heads = kKv;
  o.head_dim = kHd;
  o.seed = 11;
  return o;
}

LayerSpec tiny_spec(const std::string& preset_name) {
  return resize(preset(preset_name),
                {static_cast<int>(kE), 2, static_cast<int>(kH), static_cast<int>(kI)});
}

// The state_dict of transformers 5.24's GptOssForCausalLM (models/gpt_oss/modeling_gpt_oss.py)
// for these sizes, with the published checkpoint's MXFP4 names in place of the experts'
// gate_up_proj [E, H, 2I] and down_proj [E, I, H]: _blocks [E, rows, cols/32, 16] and
// _scales [E, rows, cols/32] (U8) of the [2I, H] and [H, I] matrices.
std::vector<Expected> gpt_oss_expected() {
  const StDtype bf = StDtype::BF16, u8 = StDtype::U8;
  std::vector<Expected> e = {{"model.embed_tokens.weight", bf, u({kVocab, kH})},
                             {"model.norm.weight", bf, u({kH})},
                             {"lm_head.weight", bf, u({kVocab, kH})}};
  for (std::uint64_t n = 0; n < kLayers; ++n) {
    const std::string p = "model.layers." + std::to_string(n) + ".";
    const std::vector<Expected> layer = {
        {"input_layernorm.weight", bf, u({kH})},
        {"post_attention_layernorm.weight", bf, u({kH})},
        {"self_attn.q_proj.weight", bf, u({kHeads * kHd, kH})},
        {"self_attn.q_proj.bias", bf, u({kHeads * kHd})},
        {"self_attn.k_proj.weight", bf, u({kKv * kHd, kH})},
        {"self_attn.k_proj.bias", bf, u({kKv * kHd})},
        {"self_attn.v_proj.weight", bf, u({kKv * kHd, kH})},
        {"self_attn.v_proj.bias", bf, u({kKv * kHd})},
        {"self_attn.o_proj.weight", bf, u({kH, kHeads * kHd})},
        {"self_attn.o_proj.bias", bf, u({kH})},
        {"self_attn.sinks", bf, u({kHeads})},
        {"mlp.router.weight", bf, u({kE, kH})},
        {"mlp.router.bias", bf, u({kE})},
        {"mlp.experts.gate_up_proj_blocks", u8, u({kE, 2 * kI, kH / 32, 16})},
        {"mlp.experts.gate_up_proj_scales", u8, u({kE, 2 * kI, kH / 32})},
        {"mlp.experts.gate_up_proj_bias", bf, u({kE, 2 * kI})},
        {"mlp.experts.down_proj_blocks", u8, u({kE, kH, kI / 32, 16})},
        {"mlp.experts.down_proj_scales", u8, u({kE, kH, kI / 32})},
        {"mlp.experts.down_proj_bias", bf, u({kE, kH})}};
    for (const Expected& t : layer) e.push_back({p + t.name, t.dtype, t.shape});
  }
  return e;
}

// transformers 5.24's Qwen3MoeForCausalLM with its experts as the published checkpoint (and
// save_pretrained, through the qwen2_moe conversion mapping) names them: per expert
// mlp.experts.{e}.{gate,up,down}_proj.weight, merged by transformers into gate_up_proj at load.
std::vector<Expected> qwen3_expected() {
  const StDtype bf = StDtype::BF16;
  std::vector<Expected> e = {{"model.embed_tokens.weight", bf, u({kVocab, kH})},
                             {"model.norm.weight", bf, u({kH})},
                             {"lm_head.weight", bf, u({kVocab, kH})}};
  for (std::uint64_t n = 0; n < kLayers; ++n) {
    const std::string p = "model.layers." + std::to_string(n) + ".";
    std::vector<Expected> layer = {{"input_layernorm.weight", bf, u({kH})},
                                   {"post_attention_layernorm.weight", bf, u({kH})},
                                   {"self_attn.q_proj.weight", bf, u({kHeads * kHd, kH})},
                                   {"self_attn.k_proj.weight", bf, u({kKv * kHd, kH})},
                                   {"self_attn.v_proj.weight", bf, u({kKv * kHd, kH})},
                                   {"self_attn.o_proj.weight", bf, u({kH, kHeads * kHd})},
                                   {"self_attn.q_norm.weight", bf, u({kHd})},
                                   {"self_attn.k_norm.weight", bf, u({kHd})},
                                   {"mlp.gate.weight", bf, u({kE, kH})}};
    for (std::uint64_t x = 0; x < kE; ++x) {
      const std::string q = "mlp.experts." + std::to_string(x) + ".";
      layer.push_back({q + "gate_proj.weight", bf, u({kI, kH})});
      layer.push_back({q + "up_proj.weight", bf, u({kI, kH})});
      layer.push_back({q + "down_proj.weight", bf, u({kH, kI})});
    }
    for (const Expected& t : layer) e.push_back({p + t.name, t.dtype, t.shape});
  }
  return e;
}

std::vector<Expected> written(const io::TensorSet& set) {
  std::vector<Expected> out;
  for (const auto& [name, t] : set.tensors()) out.push_back({name, t.info->dtype, t.info->shape});
  return out;
}

double mean_square_bf16(std::span<const std::uint8_t> bytes) {
  double sum = 0;
  for (std::size_t i = 0; i < bytes.size(); i += 2) {
    std::uint16_t v;
    std::memcpy(&v, bytes.data() + i, 2);
    const double x = bf16_to_f32(v);
    EXPECT_TRUE(std::isfinite(x));
    sum += x * x;
  }
  return sum / static_cast<double>(bytes.size() / 2);
}

// The files beside the tensors: config.json reads back in mxmoe as the spec and holds the
// published fields; the tokenizer has the 256 byte tokens and the special tokens at ids of
// the vocabulary; generation_config.json names them.
void expect_model_files(const std::string& dir, const std::string& model_type) {
  const auto config = nlohmann::json::parse(io::read_text_file(dir + "/config.json"));
  EXPECT_EQ(config.at("model_type"), model_type);
  EXPECT_EQ(config.at("vocab_size"), kVocab);
  EXPECT_EQ(config.at("num_hidden_layers"), kLayers);
  EXPECT_EQ(config.at("num_attention_heads"), kHeads);
  EXPECT_EQ(config.at("num_key_value_heads"), kKv);
  EXPECT_EQ(config.at("head_dim"), kHd);
  EXPECT_EQ(config.at("tie_word_embeddings"), false);
  const auto tokenizer = nlohmann::json::parse(io::read_text_file(dir + "/tokenizer.json"));
  const auto& vocab = tokenizer.at("model").at("vocab");
  std::set<int> ids;
  for (const auto& [token, id] : vocab.items()) ids.insert(id.get<int>());
  EXPECT_EQ(ids.size(), vocab.size());
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_LT(*ids.rbegin(), static_cast<int>(kVocab));
  // A byte-level BPE: the 256 byte tokens, a token per merge (learned from a fixed text, so
  // the same on every machine), the special tokens.
  const auto& merges = tokenizer.at("model").at("merges");
  EXPECT_GT(merges.size(), 20u);  // kVocab leaves 35 ids below the special tokens
  EXPECT_EQ(vocab.size(), 256 + merges.size() + tokenizer.at("added_tokens").size());
  for (const auto& merge : merges) {
    const std::string m = merge.get<std::string>();
    const std::size_t space = m.find(' ');
    ASSERT_NE(space, std::string::npos) << m;
    EXPECT_TRUE(vocab.contains(m.substr(0, space) + m.substr(space + 1))) << m;
  }
  for (const auto& added : tokenizer.at("added_tokens"))
    EXPECT_EQ(vocab.at(added.at("content").get<std::string>()), added.at("id"));
  const auto generation =
      nlohmann::json::parse(io::read_text_file(dir + "/generation_config.json"));
  for (const auto& id : generation.at("eos_token_id")) EXPECT_TRUE(ids.count(id.get<int>()));
  const auto tokenizer_config =
      nlohmann::json::parse(io::read_text_file(dir + "/tokenizer_config.json"));
  EXPECT_TRUE(vocab.contains(tokenizer_config.at("eos_token").get<std::string>()));
}

TEST(GenerateFull, GptOssHasEveryTensorOfTheTransformersModel) {
  TempDir dir;
  const std::string out = dir / "oss";
  const LayerSpec spec = tiny_spec("gpt-oss-20b");
  GenerateOptions o = tiny_full();
  std::vector<std::string> progress;
  o.progress = [&](const std::string& line) { progress.push_back(line); };
  generate_checkpoint(out, spec, o);
  const io::TensorSet set = io::TensorSet::open_dir(out);
  std::vector<Expected> want = gpt_oss_expected(), got = written(set);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(generated_tensor_bytes(spec, o), set.tensor_bytes());
  EXPECT_THAT(progress.back(), ::testing::HasSubstr("(100%)"));
  expect_model_files(out, "gpt_oss");
  const auto config = nlohmann::json::parse(io::read_text_file(out + "/config.json"));
  EXPECT_EQ(config.at("layer_types"), nlohmann::json({"sliding_attention", "full_attention"}));
  EXPECT_EQ(config.at("quantization_config").at("quant_method"), "mxfp4");
  EXPECT_EQ(config.at("rope_scaling").at("rope_type"), "yarn");

  // Values: norms 1, linear weights of variance 1/fan_in, E8M0 scales in the generator's range.
  for (const auto& [name, t] : set.tensors()) {
    SCOPED_TRACE(name);
    const auto bytes = t.data();
    if (name.ends_with("norm.weight")) {
      for (std::size_t i = 0; i < bytes.size(); i += 2)
        ASSERT_EQ(bf16_to_f32(static_cast<std::uint16_t>(bytes[i] | bytes[i + 1] << 8)), 1.0f);
    } else if (name.ends_with("proj.weight") || name == "lm_head.weight") {
      const double fan_in = static_cast<double>(t.info->shape[1]);
      EXPECT_NEAR(mean_square_bf16(bytes) * fan_in, 1.0, 0.15);
    } else if (name.ends_with("_scales")) {
      const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
      EXPECT_EQ(*hi - *lo, 2);
    }
  }
  // mxmoe runs its MoE layers, and they give finite outputs of unit scale.
  Request r;
  r.activation = ActivationFormat::f32;
  r.forced_backend = "reference";
  Model model(out, probe_hardware(), mxmoe::testing::test_runtime(1), ModelOptions{r, false});
  ASSERT_EQ(model.moe_layers(), (std::vector<int>{0, 1}));
  const std::vector<float> x = testing_io::random_input(5, static_cast<int>(kH), 3);
  std::vector<float> y(x.size());
  model.layer(1).forward({.tokens = 5, .x = x.data(), .y = y.data()});
  double sum = 0;
  for (const float v : y) {
    ASSERT_TRUE(std::isfinite(v));
    sum += static_cast<double>(v) * static_cast<double>(v);
  }
  EXPECT_GT(sum / static_cast<double>(y.size()), 1e-3);
  EXPECT_LT(sum / static_cast<double>(y.size()), 1e3);
}

TEST(GenerateFull, Qwen3IsBf16PerExpertAndQuantizes) {
  TempDir dir;
  const std::string out = dir / "qwen", quantized = dir / "q";
  const LayerSpec spec = tiny_spec("qwen3-30b-a3b");
  const GenerateOptions o = tiny_full();
  generate_checkpoint(out, spec, o);
  const io::TensorSet set = io::TensorSet::open_dir(out);
  std::vector<Expected> want = qwen3_expected(), got = written(set);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  expect_model_files(out, "qwen3_moe");
  const auto config = nlohmann::json::parse(io::read_text_file(out + "/config.json"));
  EXPECT_FALSE(config.contains("quantization_config"));  // BF16, as published
  EXPECT_THROW((void)Checkpoint::open(out), LoadError);  // mxmoe runs MXFP4: quantize first

  produce::quantize_checkpoint(out, quantized, {});
  const Checkpoint c = Checkpoint::open(quantized);
  LayerSpec read = c.layer_spec(1);
  read.name = spec.name;
  EXPECT_EQ(read, spec);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    EXPECT_EQ(io::read_text_file(out + "/" + file), io::read_text_file(quantized + "/" + file));
  Request r;
  r.activation = ActivationFormat::f32;
  r.forced_backend = "reference";
  MoeLayer layer = make_layer(c.layer_spec(1), c.layer_weights(1), probe_hardware(), r,
                              mxmoe::testing::test_runtime(1));
  const std::vector<float> x = testing_io::random_input(4, static_cast<int>(kH), 8);
  std::vector<float> y(x.size());
  layer.forward({.tokens = 4, .x = x.data(), .y = y.data()});
  for (const float v : y) ASSERT_TRUE(std::isfinite(v));
}

// Shards hold at most max_shard_bytes (a larger tensor alone); the bytes of every tensor are
// a function of the seed only, not of how they are cut into shards and pieces.
TEST(GenerateFull, ShardsAreBoundedAndTheBytesDoNotDependOnThem) {
  TempDir dir;
  const LayerSpec spec = tiny_spec("gpt-oss-20b");
  GenerateOptions whole = tiny_full(), cut = tiny_full(), other = tiny_full();
  cut.max_shard_bytes = 20000;
  other.seed = 12;
  generate_checkpoint(dir / "whole", spec, whole);
  generate_checkpoint(dir / "cut", spec, cut);
  generate_checkpoint(dir / "other", spec, other);
  const io::TensorSet a = io::TensorSet::open_dir(dir / "whole"),
                      b = io::TensorSet::open_dir(dir / "cut"),
                      c = io::TensorSet::open_dir(dir / "other");
  EXPECT_EQ(a.files().size(), 1u);
  EXPECT_GT(b.files().size(), 5u);
  for (const SafetensorsFile& f : b.files()) {
    std::uint64_t bytes = 0;
    for (const TensorInfo& t : f.header().tensors) bytes += t.bytes();
    EXPECT_TRUE(bytes <= cut.max_shard_bytes || f.header().tensors.size() == 1) << f.path();
  }
  int differ = 0;
  for (const auto& [name, t] : a.tensors()) {
    const auto x = t.data(), y = b.find(name)->data(), z = c.find(name)->data();
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << name;
    differ += !std::equal(x.begin(), x.end(), z.begin(), z.end());
  }
  EXPECT_GT(differ, 30);  // every random tensor (not the norms) follows the seed
}

TEST(GenerateFull, CancellationLeavesNothing) {
  TempDir dir;
  GenerateOptions o = tiny_full();
  o.max_shard_bytes = 20000;
  int polls = 0;
  o.cancelled = [&] { return ++polls >= 12; };
  EXPECT_THROW(generate_checkpoint(dir / "m", tiny_spec("gpt-oss-20b"), o), GenerateCancelled);
  EXPECT_EQ(polls, 12);
  EXPECT_FALSE(fs::exists(dir / "m"));
  EXPECT_EQ(testing_io::temporaries_in(dir.path()), 0);
}

TEST(GenerateFull, RefusesWhatItCannotWriteNamingIt) {
  TempDir dir;
  const auto refused = [&](const LayerSpec& spec, const GenerateOptions& o) {
    try {
      (void)generated_tensor_bytes(spec, o);
    } catch (const std::invalid_argument& e) {
      EXPECT_THROW(generate_checkpoint(dir / "x", spec, o), std::invalid_argument);
      EXPECT_FALSE(fs::exists(dir / "x"));
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const LayerSpec oss = tiny_spec("gpt-oss-20b");
  GenerateOptions o = tiny_full();
  EXPECT_THAT(refused(small("mixtral-8x7b"), o), HasSubstr("gpt-oss and Qwen3-MoE"));
  o.kv_heads = 3;
  EXPECT_THAT(refused(oss, o), HasSubstr("4 attention heads do not divide into 3"));
  o = tiny_full();
  o.vocab = 200;
  EXPECT_THAT(refused(oss, o), HasSubstr("vocab"));
  o = tiny_full();
  o.head_dim = 15;
  EXPECT_THAT(refused(oss, o), HasSubstr("even"));
  o = tiny_full();
  o.full = false;
  EXPECT_THAT(refused(oss, o), HasSubstr("for the whole model"));
}

}  // namespace
}  // namespace mxmoe
