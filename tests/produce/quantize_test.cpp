// `mxmoe quantize` core: a BF16 Mixtral-style checkpoint written here -> MXFP4 checkpoint ->
// loads back with the recorded layout, its weights are within the MXFP4 rounding bound of
// the originals, and its layer matches a float64 evaluation of the dequantized weights.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "io/io_fixtures.hpp"
#include "io/mapped_file.hpp"
#include "io/tensor_set.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer.hpp"
#include "produce/quantize_checkpoint.hpp"
#include "test_runtime.hpp"

namespace mxmoe {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing_io::TempDir;

using testing_io::Bf16Expert;
using testing_io::Bf16Layer;
using testing_io::kE;
using testing_io::kH;
using testing_io::kI;
using testing_io::kK;
using testing_io::kLayers;
using testing_io::write_bf16_mixtral;

std::vector<std::uint8_t> tensor_bytes(const std::string& dir, const std::string& name) {
  const auto index =
      parse_safetensors_index(io::read_text_file(dir + "/model.safetensors.index.json"), "index");
  const SafetensorsFile f = SafetensorsFile::open(dir + "/" + index.weight_map.at(name));
  const auto data = f.data(*f.find(name));
  return {data.begin(), data.end()};
}

// float64 Mixtral layer: softmax over all E, top-k (ties: lower index), renormalise,
// silu(gate) * up with gate/up as halves, no biases.
std::vector<double> mixtral_reference(const std::vector<float>& router,
                                      const std::vector<std::vector<double>>& w1,
                                      const std::vector<std::vector<double>>& w2,
                                      const std::vector<float>& x, int tokens) {
  std::vector<double> y(static_cast<std::size_t>(tokens * kH), 0.0);
  for (int t = 0; t < tokens; ++t) {
    const float* xt = x.data() + t * kH;
    std::vector<std::pair<double, int>> p(kE);
    for (int e = 0; e < kE; ++e) {
      double s = 0;
      for (int h = 0; h < kH; ++h)
        s += static_cast<double>(router[static_cast<std::size_t>(e * kH + h)]) *
             static_cast<double>(xt[h]);
      p[static_cast<std::size_t>(e)] = {s, e};
    }
    std::stable_sort(p.begin(), p.end(), [](auto& a, auto& b) { return a.first > b.first; });
    double denom = 0;
    for (int j = 0; j < kK; ++j)
      denom += std::exp(p[static_cast<std::size_t>(j)].first - p[0].first);
    for (int j = 0; j < kK; ++j) {
      const int e = p[static_cast<std::size_t>(j)].second;
      const double weight = std::exp(p[static_cast<std::size_t>(j)].first - p[0].first) / denom;
      const auto& a1 = w1[static_cast<std::size_t>(e)];
      const auto& a2 = w2[static_cast<std::size_t>(e)];
      std::vector<double> act(kI);
      for (int i = 0; i < kI; ++i) {
        double g = 0, u = 0;
        for (int h = 0; h < kH; ++h) {
          const auto xh = static_cast<double>(xt[h]);
          g += a1[static_cast<std::size_t>(i * kH + h)] * xh;
          u += a1[static_cast<std::size_t>((kI + i) * kH + h)] * xh;
        }
        act[static_cast<std::size_t>(i)] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int h = 0; h < kH; ++h) {
        double s = 0;
        for (int i = 0; i < kI; ++i)
          s += a2[static_cast<std::size_t>(h * kI + i)] * act[static_cast<std::size_t>(i)];
        y[static_cast<std::size_t>(t * kH + h)] += weight * s;
      }
    }
  }
  return y;
}

TEST(Quantize, Bf16MixtralRoundTripLoadsAndMatchesFloat64) {
  TempDir in, out_parent;
  std::vector<std::vector<std::uint8_t>> keep;
  const auto layers = write_bf16_mixtral(in.path(), keep);
  EXPECT_THROW(Checkpoint::open(in.path()), LoadError);  // BF16: must be quantized first

  const std::string out = out_parent / "q";
  std::vector<std::string> progress;
  produce::QuantizeOptions options;
  options.progress = [&](const std::string& line) { progress.push_back(line); };
  produce::quantize_checkpoint(in.path(), out, options);
  EXPECT_EQ(progress.size(), static_cast<std::size_t>(kLayers));

  const Checkpoint c = Checkpoint::open(out);
  const LayerSpec spec = c.layer_spec(1);
  EXPECT_EQ(spec.family, Family::mixtral);
  EXPECT_EQ(spec.gate_up_layout, GateUpLayout::halves);
  EXPECT_FALSE(spec.expert_bias);

  for (int n = 0; n < kLayers; ++n) {
    const auto& l = layers[static_cast<std::size_t>(n)];
    const std::string p = "model.layers." + std::to_string(n) + ".mlp.experts.";
    const auto b1 = tensor_bytes(out, p + "gate_up_proj_blocks");
    const auto s1 = tensor_bytes(out, p + "gate_up_proj_scales");
    const auto b2 = tensor_bytes(out, p + "down_proj_blocks");
    const auto s2 = tensor_bytes(out, p + "down_proj_scales");
    std::vector<std::vector<double>> w1, w2;
    for (int e = 0; e < kE; ++e) {
      w1.push_back(testing_io::dequant(b1, s1, static_cast<std::size_t>(e), 2 * kI, kH));
      w2.push_back(testing_io::dequant(b2, s2, static_cast<std::size_t>(e), kH, kI));
      // Round-up scale rule: |x| <= 6 * 2^s, and E2M1 steps are at most 2 * 2^s apart, so
      // the rounding error is at most 2^s (the block's scale).
      const auto& ex = l.experts[static_cast<std::size_t>(e)];
      for (int r = 0; r < 2 * kI; ++r)
        for (int h = 0; h < kH; ++h) {
          const std::size_t row = static_cast<std::size_t>(e * 2 * kI + r);
          const double bound =
              std::ldexp(1.0, s1[row * kH / 32 + static_cast<std::size_t>(h / 32)] - 127);
          const double orig =
              static_cast<double>(r < kI ? ex.gate[static_cast<std::size_t>(r * kH + h)]
                                         : ex.up[static_cast<std::size_t>((r - kI) * kH + h)]);
          ASSERT_LE(std::abs(w1.back()[static_cast<std::size_t>(r * kH + h)] - orig), bound);
        }
    }
    Request request;
    request.activation = ActivationFormat::f32;
    request.forced_backend = "reference";
    request.threads = 1;
    const LayerWeights w = c.layer_weights(n);
    MoeLayer moe =
        make_layer(c.layer_spec(n), w, probe_hardware(), request, mxmoe::testing::test_runtime(2));
    const int tokens = 6;
    const auto x = testing_io::random_input(tokens, kH, 40u + static_cast<std::uint32_t>(n));
    std::vector<float> y(x.size());
    moe.forward({.tokens = tokens, .x = x.data(), .y = y.data()});
    // float32 accumulation over <= 96 terms against float64: see checkpoint_test.cpp.
    EXPECT_LT(testing_io::relative_l2(y, mixtral_reference(l.router, w1, w2, x, tokens)), 2e-5);
  }
}

TEST(Quantize, RefusesAnExistingOutputWithoutForce) {
  TempDir in, out;
  std::vector<std::vector<std::uint8_t>> keep;
  write_bf16_mixtral(in.path(), keep);
  EXPECT_THAT(
      [&] {
        try {
          produce::quantize_checkpoint(in.path(), out.path(), {});
        } catch (const LoadError& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      HasSubstr("--force"));
  produce::QuantizeOptions force;
  force.force = true;
  force.scale_rule = ScaleRule::floor;
  produce::quantize_checkpoint(in.path(), out.path(), force);
  EXPECT_NO_THROW((void)Checkpoint::open(out.path()).layer_weights(0));
}

TEST(Quantize, RejectsNanInAWeight) {
  TempDir in, out;
  std::vector<std::vector<std::uint8_t>> keep;
  write_bf16_mixtral(in.path(), keep);
  // Rewrite with a NaN in layer 0 expert 2's up projection (bf16 0x7FC0).
  const SafetensorsFile f = SafetensorsFile::open(in / "model.safetensors");
  std::vector<std::vector<std::uint8_t>> copies;
  std::vector<TensorToWrite> tensors;
  copies.reserve(f.header().tensors.size());
  for (const auto& t : f.header().tensors) {
    const auto d = f.data(t);
    copies.emplace_back(d.begin(), d.end());
    if (t.name == "model.layers.0.mlp.experts.2.up_proj.weight") {
      copies.back()[2 * 9] = 0xC0;
      copies.back()[2 * 9 + 1] = 0x7F;
    }
    tensors.push_back({t.name, t.dtype, t.shape, copies.back()});
  }
  write_safetensors(in / "model2.safetensors", tensors);
  std::filesystem::rename(in / "model2.safetensors", in / "model.safetensors");
  produce::QuantizeOptions force;
  force.force = true;
  try {
    produce::quantize_checkpoint(in.path(), out.path(), force);
    FAIL() << "expected LoadError";
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("experts.2.up_proj.weight"));
    EXPECT_THAT(e.what(), HasSubstr("index 9"));
  }
}

// --- quantize is transactional: a temporary sibling directory renamed into place ---------

using testing_io::directory_snapshot;
using testing_io::temporaries_in;

struct QuantizeFixture : ::testing::Test {
  TempDir root;
  std::string in = root / "in", out = root / "out";
  std::vector<std::vector<std::uint8_t>> keep;
  std::map<std::string, std::string> previous;

  // OUT from a first conversion, plus a stale file an earlier mxmoe output left there (a
  // single-file model.safetensors: listed in the marker, so mxmoe's to replace; a file the
  // marker does not list is a user's, and --force refuses it: CliLostData).
  void SetUp() override {
    std::filesystem::create_directories(in);
    write_bf16_mixtral(in, keep, 3, 1);
    produce::quantize_checkpoint(in, out, {});
    testing_io::write_bytes(out + "/model.safetensors", "stale");
    std::ofstream(out + "/.mxmoe-checkpoint", std::ios::app) << "model.safetensors\n";
    previous = directory_snapshot(out);
    ASSERT_EQ(previous.size(), 7u);  // 3 shards, index, config, mxmoe's marker, the stray file
  }
};

// --force replaces the directory as a whole: no file of the old one survives (a stale
// model.safetensors beside new shards would win at load time and load silently).
TEST_F(QuantizeFixture, ForceReplacesTheWholeDirectory) {
  write_bf16_mixtral(in, keep, 2, 2);
  produce::QuantizeOptions force;
  force.force = true;
  produce::quantize_checkpoint(in, out, force);
  const auto now = directory_snapshot(out);
  EXPECT_EQ(now.count("model.safetensors"), 0u);
  EXPECT_EQ(now.size(), 5u);  // 2 shards, index, config, the marker
  EXPECT_EQ(Checkpoint::open(out).num_layers(), 2);
  EXPECT_EQ(temporaries_in(root.path()), 0);
}

TEST_F(QuantizeFixture, ExistingOutputIsRefusedWithoutForce) {
  try {
    produce::quantize_checkpoint(in, out, {});
    FAIL();
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("--force"));
  }
  EXPECT_EQ(directory_snapshot(out), previous);
}

// A failure in the last layer (a NaN weight) after two layers were written: OUT is exactly
// as it was, and nothing is left beside it.
TEST_F(QuantizeFixture, FailureMidwayLeavesThePreviousOutputIntact) {
  write_bf16_mixtral(in, keep, 3, 2, /*nan_layer=*/2);
  produce::QuantizeOptions force;
  force.force = true;
  int layers_done = 0;
  force.progress = [&](const std::string&) { ++layers_done; };
  EXPECT_THROW(produce::quantize_checkpoint(in, out, force), LoadError);
  EXPECT_EQ(layers_done, 2);
  EXPECT_EQ(directory_snapshot(out), previous);
  EXPECT_EQ(temporaries_in(root.path()), 0);
}

// Cancelled (what SIGINT does in the CLI) after the first layer: the same.
TEST_F(QuantizeFixture, CancellationLeavesThePreviousOutputIntact) {
  write_bf16_mixtral(in, keep, 3, 2);
  produce::QuantizeOptions force;
  force.force = true;
  int layers_done = 0;
  force.progress = [&](const std::string&) { ++layers_done; };
  force.cancelled = [&] { return layers_done >= 1; };
  EXPECT_THROW(produce::quantize_checkpoint(in, out, force), produce::QuantizeCancelled);
  EXPECT_EQ(layers_done, 1);
  EXPECT_EQ(directory_snapshot(out), previous);
  EXPECT_EQ(temporaries_in(root.path()), 0);
}

// IN's shards truncated while quantize reads them (after its first layer): reading the lost
// pages was a bus error that killed the process; it is a LoadError naming the file, and OUT is
// exactly as it was.
TEST_F(QuantizeFixture, AnInputTruncatedWhileReadIsALoadErrorNamingIt) {
  write_bf16_mixtral(in, keep, 3, 2);
  produce::QuantizeOptions force;
  force.force = true;
  int layers_done = 0;
  force.progress = [&](const std::string&) {
    if (++layers_done != 1) return;
    for (const auto& entry : std::filesystem::directory_iterator(in))
      if (entry.path().extension() == ".safetensors") std::filesystem::resize_file(entry, 0);
  };
  try {
    produce::quantize_checkpoint(in, out, force);
    FAIL() << "quantized a truncated input";
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr(".safetensors: the file changed on disk"));
  }
  EXPECT_EQ(layers_done, 1);
  EXPECT_EQ(directory_snapshot(out), previous);
  EXPECT_EQ(temporaries_in(root.path()), 0);
}

// Replacing a directory that holds the input would delete the input: refused.
TEST_F(QuantizeFixture, OutputContainingTheInputIsRefused) {
  const std::string nested_in = out + "/src";
  std::filesystem::create_directories(nested_in);
  write_bf16_mixtral(nested_in, keep, 1, 3);
  produce::QuantizeOptions force;
  force.force = true;
  try {
    produce::quantize_checkpoint(nested_in, out, force);
    FAIL();
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("contains the input"));
  }
  EXPECT_TRUE(std::filesystem::exists(nested_in + "/model.safetensors"));
}

// --- quantize writes a complete model -----------------------------------------------------

// A BF16 DeepSeek-V3-style model as a transformers save would hold it: layer 0 a dense MLP,
// layers 1-2 MoE (per-expert matrices, router, F32 selection bias, a shared expert), attention
// and norms in every layer, embeddings, final norm and head, a tensor of a layer beyond
// num_hidden_layers (DeepSeek's MTP layer), over two shards; beside them the tokenizer and
// generation files, a chat template, a subdirectory and a weight file of another format.
struct CompleteModel {
  static constexpr int kLayersTotal = 3, kV = 96, kIs = kI;
  std::vector<std::vector<std::uint8_t>> keep;
  std::map<std::string, TensorToWrite> tensors;    // every tensor of IN by name
  std::map<std::string, std::string> other_files;  // copied to OUT byte for byte
  nlohmann::json config;

  void write(const std::string& dir, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<TensorToWrite> shard[2];
    const auto add = [&](int s, const std::string& name, StDtype dtype,
                         std::vector<std::uint64_t> shape, std::vector<std::uint8_t> bytes) {
      keep.push_back(std::move(bytes));
      shard[s].push_back({name, dtype, std::move(shape), keep.back()});
      tensors[name] = shard[s].back();
    };
    const auto bf16 = [&](int s, const std::string& name, int rows, int cols, float scale) {
      add(s, name, StDtype::BF16,
          rows == 0 ? testing_io::u64s({cols}) : testing_io::u64s({rows, cols}),
          testing_io::bf16_bytes(testing_io::random_bf16_values(
              rng, static_cast<std::size_t>(std::max(rows, 1) * cols), scale)));
    };
    keep.reserve(512);
    bf16(0, "model.embed_tokens.weight", kV, kH, 1.0f);
    for (int n = 0; n < kLayersTotal; ++n) {
      const std::string p = "model.layers." + std::to_string(n) + ".";
      const int s = n < 2 ? 0 : 1;
      bf16(s, p + "input_layernorm.weight", 0, kH, 1.0f);
      bf16(s, p + "post_attention_layernorm.weight", 0, kH, 1.0f);
      bf16(s, p + "self_attn.q_a_proj.weight", 32, kH, 0.1f);
      bf16(s, p + "self_attn.kv_b_proj.weight", 64, 32, 0.1f);
      bf16(s, p + "self_attn.o_proj.weight", kH, 64, 0.1f);
      if (n == 0) {
        bf16(s, p + "mlp.gate_proj.weight", 128, kH, 0.1f);
        bf16(s, p + "mlp.up_proj.weight", 128, kH, 0.1f);
        bf16(s, p + "mlp.down_proj.weight", kH, 128, 0.1f);
        continue;
      }
      bf16(s, p + "mlp.gate.weight", kE, kH, 0.2f);
      std::vector<float> bias(kE);
      for (auto& b : bias) b = static_cast<float>(rng() % 100) / 1000.0f;
      std::vector<std::uint8_t> bias_bytes(kE * 4);
      std::memcpy(bias_bytes.data(), bias.data(), bias_bytes.size());
      add(s, p + "mlp.gate.e_score_correction_bias", StDtype::F32, testing_io::u64s({kE}),
          std::move(bias_bytes));
      for (int e = 0; e < kE; ++e) {
        const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
        bf16(s, q + "gate_proj.weight", kI, kH, 0.05f);
        bf16(s, q + "up_proj.weight", kI, kH, 0.05f);
        bf16(s, q + "down_proj.weight", kH, kI, 0.05f);
      }
      bf16(s, p + "mlp.shared_experts.gate_proj.weight", kIs, kH, 0.05f);
      bf16(s, p + "mlp.shared_experts.up_proj.weight", kIs, kH, 0.05f);
      bf16(s, p + "mlp.shared_experts.down_proj.weight", kH, kIs, 0.05f);
    }
    bf16(1, "model.layers.3.embed_tokens.weight", kV, kH, 1.0f);  // beyond the layers
    bf16(1, "model.norm.weight", 0, kH, 1.0f);
    bf16(1, "lm_head.weight", kV, kH, 0.1f);
    nlohmann::json map = nlohmann::json::object();
    for (int s = 0; s < 2; ++s) {
      const std::string file = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
      write_safetensors(dir + "/" + file, shard[s]);
      for (const auto& t : shard[s]) map[t.name] = file;
    }
    std::ofstream(dir + "/model.safetensors.index.json")
        << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump();
    config = {{"architectures", {"DeepseekV3ForCausalLM"}},
              {"model_type", "deepseek_v3"},
              {"n_routed_experts", kE},
              {"num_experts_per_tok", kK},
              {"hidden_size", kH},
              {"intermediate_size", 128},
              {"moe_intermediate_size", kI},
              {"n_shared_experts", 1},
              {"n_group", 1},
              {"topk_group", 1},
              {"routed_scaling_factor", 2.5},
              {"scoring_func", "sigmoid"},
              {"topk_method", "noaux_tc"},
              {"norm_topk_prob", true},
              {"first_k_dense_replace", 1},
              {"moe_layer_freq", 1},
              {"num_hidden_layers", kLayersTotal},
              {"num_nextn_predict_layers", 1},
              {"hidden_act", "silu"},
              {"vocab_size", kV},
              {"rope_theta", 10000.0},
              {"rope_scaling", {{"type", "yarn"}, {"factor", 40}}},
              {"torch_dtype", "bfloat16"}};
    testing_io::write_config(dir, config);
    other_files = {{"tokenizer.json", R"({"version": "1.0", "model": {"type": "BPE"}})"},
                   {"tokenizer_config.json", R"({"eos_token": "<|end|>"})"},
                   {"generation_config.json", R"({"bos_token_id": 0, "do_sample": true})"},
                   {"chat_template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}"},
                   {"special_tokens_map.json", "{}"},
                   {"vocab.txt", std::string("a\nb\n\xff\x00z", 7)}};
    for (const auto& [name, bytes] : other_files) testing_io::write_bytes(dir + "/" + name, bytes);
    std::filesystem::create_directories(dir + "/original");
    testing_io::write_bytes(dir + "/original/model.safetensors", "not read");
    testing_io::write_bytes(dir + "/pytorch_model.bin", "the experts again");
  }
};

// IN written as above, OUT beside it (not yet written).
struct QuantizeCompleteModel : ::testing::Test {
  TempDir root;
  std::string in = root / "in", out = root / "out";
  CompleteModel model;
  void SetUp() override {
    std::filesystem::create_directories(in);
    model.write(in, 5);
  }
};

TEST_F(QuantizeCompleteModel, EveryNonExpertTensorAndFileIsCopiedUnchanged) {
  std::vector<std::string> progress;
  produce::QuantizeOptions options;
  options.progress = [&](const std::string& line) { progress.push_back(line); };
  produce::quantize_checkpoint(in, out, options);

  // The index covers every tensor of every shard exactly once (TensorSet checks each shard
  // against it), and its total_size is their bytes.
  const io::TensorSet set = io::TensorSet::open_dir(out);
  const auto index_text = io::read_text_file(out + "/model.safetensors.index.json");
  const auto index = parse_safetensors_index(index_text, "index");
  EXPECT_EQ(index.weight_map.size(), set.tensors().size());
  EXPECT_EQ(index.total_size, set.tensor_bytes());
  EXPECT_EQ(set.files().size(), 4u);  // layers 0, 1, 2 and the rest

  for (const auto& [name, t] : model.tensors) {
    SCOPED_TRACE(name);
    const bool routed_expert = name.find(".mlp.experts.") != std::string::npos;
    const io::TensorRef* got = set.find(name);
    if (routed_expert) {
      EXPECT_EQ(got, nullptr);  // quantized, not copied
      continue;
    }
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->info->dtype, t.dtype);
    EXPECT_EQ(got->info->shape, t.shape);
    const auto bytes = got->data();
    ASSERT_EQ(bytes.size(), t.data.size());
    EXPECT_EQ(std::memcmp(bytes.data(), t.data.data(), bytes.size()), 0);
  }
  // What mxmoe adds: the MXFP4 experts, its router names and the fused shared expert.
  for (const char* added :
       {"model.layers.1.mlp.router.weight", "model.layers.1.mlp.router.e_score_correction_bias",
        "model.layers.2.mlp.experts.gate_up_proj_blocks",
        "model.layers.2.mlp.shared_experts.down_proj_scales"})
    EXPECT_NE(set.find(added), nullptr) << added;
  std::size_t expected = 0;
  for (const auto& [name, t] : model.tensors)
    expected += name.find(".mlp.experts.") == std::string::npos;
  EXPECT_EQ(set.tensors().size(), expected + 2 * 10);  // 10 mxmoe tensors per MoE layer

  // The other files, byte for byte; neither the subdirectory nor the other weight format.
  const auto files = testing_io::directory_snapshot(out);
  for (const auto& [name, bytes] : model.other_files) EXPECT_EQ(files.at(name), bytes) << name;
  EXPECT_EQ(files.count("pytorch_model.bin"), 0u);
  EXPECT_FALSE(std::filesystem::exists(out + "/original"));
  EXPECT_THAT(progress, ::testing::Contains(HasSubstr("not copied (directories, weights in other "
                                                      "formats): original/, pytorch_model.bin")));

  // config.json: every field of IN's, with the quantization_config mxmoe reads.
  const auto config = nlohmann::json::parse(files.at("config.json"));
  for (const auto& [key, value] : model.config.items()) EXPECT_EQ(config.at(key), value) << key;
  EXPECT_EQ(config.at("quantization_config").at("quant_method"), "mxfp4");
  EXPECT_EQ(config.size(), model.config.size() + 1);

  // The MoE layers load as from a conversion of IN's MoE tensors alone (what quantize wrote
  // before it wrote whole models): the same bits.
  const std::string moe_in = root / "moe_in", moe_out = root / "moe_out";
  std::filesystem::create_directories(moe_in);
  std::vector<TensorToWrite> moe_tensors;
  for (const auto& [name, t] : model.tensors)
    if (name.find(".mlp.experts.") != std::string::npos ||
        name.find(".mlp.gate.") != std::string::npos ||
        name.find(".mlp.shared_experts.") != std::string::npos)
      moe_tensors.push_back(t);
  write_safetensors(moe_in + "/model.safetensors", moe_tensors);
  testing_io::write_config(moe_in, model.config);
  produce::quantize_checkpoint(moe_in, moe_out, {});
  const Checkpoint full = Checkpoint::open(out), alone = Checkpoint::open(moe_out);
  EXPECT_EQ(full.non_moe_reason(0), alone.non_moe_reason(0));
  EXPECT_NE(full.non_moe_reason(0), "");
  Request request;
  request.activation = ActivationFormat::f32;
  request.forced_backend = "reference";
  for (int n = 1; n < 3; ++n) {
    LayerSpec named = alone.layer_spec(n);
    named.name = full.layer_spec(n).name;  // the directory's name
    ASSERT_EQ(full.layer_spec(n), named);
    const auto x = testing_io::random_input(5, kH, 9u + static_cast<std::uint32_t>(n));
    std::vector<float> a(x.size()), b(x.size());
    make_layer(full.layer_spec(n), full.layer_weights(n), probe_hardware(), request,
               mxmoe::testing::test_runtime(1))
        .forward({.tokens = 5, .x = x.data(), .y = a.data()});
    make_layer(alone.layer_spec(n), alone.layer_weights(n), probe_hardware(), request,
               mxmoe::testing::test_runtime(1))
        .forward({.tokens = 5, .x = x.data(), .y = b.data()});
    EXPECT_EQ(a, b) << "layer " << n;
    for (const float v : a) ASSERT_TRUE(std::isfinite(v));
  }
}

// A file of IN that cannot be copied (a FIFO, a dangling link, one over the size cap) stops
// the conversion before any tensor is written, naming it; OUT is left as it was.
TEST_F(QuantizeCompleteModel, AnUncopyableFileLeavesTheOutputAsItWas) {
  produce::quantize_checkpoint(in, out, {});
  const auto before = directory_snapshot(out);
  produce::QuantizeOptions force;
  force.force = true;
  const auto expect_refused = [&](const std::string& name, const std::string& why) {
    try {
      produce::quantize_checkpoint(in, out, force);
      ADD_FAILURE() << "copied " << name;
    } catch (const LoadError& e) {
      EXPECT_THAT(e.what(), HasSubstr(name));
      EXPECT_THAT(e.what(), HasSubstr(why));
    }
    EXPECT_EQ(directory_snapshot(out), before);
    EXPECT_EQ(temporaries_in(root.path()), 0);
    std::filesystem::remove(in + "/" + name);
  };
  ASSERT_EQ(::mkfifo((in + "/tokenizer.model").c_str(), 0600), 0);
  expect_refused("tokenizer.model", "a FIFO");
  std::filesystem::create_symlink(root / "nowhere", in + "/merges.txt");
  expect_refused("merges.txt", "cannot open");
  { std::ofstream big(in + "/big.txt"); }
  std::filesystem::resize_file(in + "/big.txt", produce::kMaxExtraFileBytes + 1);  // sparse
  expect_refused("big.txt", "more than the");
}

// Issue 38 (finding 11): tensors of layers past num_hidden_layers were copied as they were
// (unquantized experts among them), and the output then ran fewer layers than the model has.
// Only DeepSeek's MTP layers (num_nextn_predict_layers) may follow the last layer.
TEST_F(QuantizeCompleteModel, TensorsOfLayersPastTheConfigsAreRefusedUnlessMtp) {
  model.config["num_nextn_predict_layers"] = 0;
  testing_io::write_config(in, model.config);
  try {
    produce::quantize_checkpoint(in, out, {});
    ADD_FAILURE() << "a layer past num_hidden_layers was accepted";
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("\"model.layers.3.embed_tokens.weight\""),
                                HasSubstr("num_hidden_layers 3")));
  }
  EXPECT_FALSE(std::filesystem::exists(out));
  model.config["num_nextn_predict_layers"] = 1;
  model.config["num_hidden_layers"] = 2;  // layer 2 is MoE, layer 3 past the MTP layer
  testing_io::write_config(in, model.config);
  try {
    produce::quantize_checkpoint(in, out, {});
    ADD_FAILURE() << "a layer past num_hidden_layers + MTP was accepted";
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("is of layer 3"), HasSubstr("num_hidden_layers 2"),
                                HasSubstr("1 MTP layer")));
  }
}

// Issue 38: a link among IN's other files was copied wherever it led, so a hostile repository
// (`notes.txt -> /proc/self/environ`, `tokenizer.json -> /etc/passwd`) put the user's files
// into the OUT they then upload. Links are followed inside IN and, in a Hugging Face cache
// snapshot, into the repository's blobs/ only; the others are left out, named in the progress.
TEST_F(QuantizeCompleteModel, LinksOutOfTheModelDirectoryAreNotCopied) {
  namespace fs = std::filesystem;
  const std::string secret = "the user's secret";
  testing_io::write_bytes(root / "secret.txt", secret);
  fs::create_symlink(root / "secret.txt", in + "/notes.txt");
  fs::create_symlink("/proc/self/environ", in + "/env.txt");
  fs::create_symlink("../secret.txt", in + "/relative.txt");
  testing_io::write_bytes(in + "/original/inside.txt", "inside bytes");
  fs::create_symlink("original/inside.txt", in + "/inside.json");
  testing_io::write_bytes(in + "/two\nlines.txt", "split");
  std::vector<std::string> progress;
  produce::QuantizeOptions options;
  options.progress = [&](const std::string& line) { progress.push_back(line); };
  produce::quantize_checkpoint(in, out, options);
  const auto files = directory_snapshot(out);
  for (const char* name : {"notes.txt", "env.txt", "relative.txt"})
    EXPECT_EQ(files.count(name), 0u) << name;
  for (const auto& [name, bytes] : files) EXPECT_EQ(bytes.find(secret), std::string::npos) << name;
  EXPECT_EQ(files.at("inside.json"), "inside bytes");  // a link inside IN is followed
  EXPECT_THAT(progress, ::testing::Contains(::testing::AllOf(
                            HasSubstr("not copied (links that lead out of the model directory"),
                            HasSubstr("env.txt -> /proc/"), HasSubstr("notes.txt -> "),
                            HasSubstr("relative.txt -> "))));
  // Issue 38: a name with a line break was split in two in OUT's marker (its list of files):
  // left out, said.
  EXPECT_EQ(files.count("two\nlines.txt"), 0u);
  EXPECT_THAT(progress, ::testing::Contains(::testing::AllOf(HasSubstr("line break"),
                                                             HasSubstr("two\\x0alines.txt"))));

  // A Hugging Face cache snapshot: every file a link into ../../blobs/, all of them copied.
  const fs::path repo = root / "models--org--name";
  const fs::path snapshot = repo / "snapshots" / "0123abcd";
  fs::create_directories(repo / "blobs");
  fs::create_directories(snapshot);
  int blob = 0;
  const auto in_files = directory_snapshot(in);
  std::map<std::string, std::string> expected;
  for (const fs::directory_entry& e : fs::directory_iterator(in)) {
    if (!e.is_regular_file() || e.is_symlink()) continue;
    const std::string name = e.path().filename().string(), hash = "blob" + std::to_string(blob++);
    fs::copy_file(e.path(), repo / "blobs" / hash);
    fs::create_symlink(fs::path("..") / ".." / "blobs" / hash, snapshot / name);
    if (name.find(".safetensors") == std::string::npos && name != "config.json" &&
        name != "pytorch_model.bin" && name.find('\n') == std::string::npos)
      expected[name] = in_files.at(name);
  }
  ASSERT_FALSE(expected.empty());
  const std::string hub_out = root / "hub_out";
  produce::quantize_checkpoint(snapshot.string(), hub_out, {});
  const auto hub_files = directory_snapshot(hub_out);
  for (const auto& [name, bytes] : expected) EXPECT_EQ(hub_files.at(name), bytes) << name;
}

// Cancelled between the pieces of the copies (what SIGINT does), at every point of the
// conversion in turn: OUT never appears and nothing is left beside it.
TEST_F(QuantizeCompleteModel, CancellationAtAnyPollLeavesNoOutput) {
  int polls = 0;
  produce::QuantizeOptions counting;
  counting.cancelled = [&] { return ++polls < 0; };
  produce::quantize_checkpoint(in, root / "counted", counting);
  ASSERT_GT(polls, 40);  // experts, every tensor copied, each file
  for (int stop_at = 1; stop_at < polls; stop_at += 7) {
    SCOPED_TRACE(stop_at);
    int n = 0;
    produce::QuantizeOptions options;
    options.cancelled = [&] { return ++n >= stop_at; };
    EXPECT_THROW(produce::quantize_checkpoint(in, out, options), produce::QuantizeCancelled);
    EXPECT_FALSE(std::filesystem::exists(out));
    EXPECT_EQ(temporaries_in(root.path()), 0);
  }
}

}  // namespace
}  // namespace mxmoe
