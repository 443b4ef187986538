// gpt-oss-layout checkpoints written by the test's own code: they load, their layer matches
// a float64 evaluation, a sharded copy loads the same, and every malformed variant fails
// with a message naming the tensor.
#include "mxmoe/checkpoint.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "io_fixtures.hpp"
#include "mxfp4_copy.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer.hpp"
#include "test_runtime.hpp"

namespace mxmoe {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing_io::Dims;
using testing_io::TempDir;

std::string open_error(const std::string& dir) {
  try {
    const Checkpoint c = Checkpoint::open(dir);
    for (int n = 0; n < c.num_layers(); ++n) (void)c.layer_weights(n);
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

// Runs layer N through the reference backend with float32 activations (no rounding of x),
// so the only difference from the float64 evaluation is float32 accumulation: relative L2
// error ~ sqrt(K) * 2^-24 for K <= 96 terms, far below 2e-5.
std::vector<float> run_layer(const Checkpoint& c, int layer, const std::vector<float>& x,
                             int tokens) {
  Request request;
  request.activation = ActivationFormat::f32;
  request.forced_backend = "reference";
  request.threads = 1;
  const LayerWeights w = c.layer_weights(layer);
  MoeLayer moe = make_layer(c.layer_spec(layer), w, probe_hardware(), request,
                            mxmoe::testing::test_runtime(2));
  std::vector<float> y(x.size());
  moe.forward({.tokens = tokens, .x = x.data(), .y = y.data()});
  return y;
}

TEST(GptOssCheckpoint, LoadsAndMatchesFloat64Evaluation) {
  TempDir dir;
  const Dims d;
  const auto layers = testing_io::write_gpt_oss_checkpoint(dir.path(), d, /*sharded=*/false);
  const Checkpoint c = Checkpoint::open(dir.path());
  ASSERT_EQ(c.num_layers(), 2);
  const LayerSpec spec = c.layer_spec(1);
  EXPECT_EQ(spec.family, Family::gpt_oss);
  EXPECT_EQ(spec.num_experts, 4);
  EXPECT_EQ(spec.top_k, 2);
  EXPECT_EQ(spec.hidden, 64);
  EXPECT_EQ(spec.intermediate, 96);
  EXPECT_EQ(spec.gate_up_layout, GateUpLayout::interleaved);
  EXPECT_TRUE(spec.expert_bias && spec.router_bias);

  const int tokens = 8;
  const auto x = testing_io::random_input(tokens, d.hidden, 11);
  for (int layer = 0; layer < 2; ++layer) {
    const auto want =
        testing_io::gpt_oss_reference(d, layers[static_cast<std::size_t>(layer)], x, tokens);
    const auto got = run_layer(c, layer, x, tokens);
    EXPECT_LT(testing_io::relative_l2(got, want), 2e-5) << "layer " << layer;
  }
}

TEST(GptOssCheckpoint, ViewsPointIntoTheMappingWithoutCopies) {
  TempDir dir;
  const Dims d;
  const auto layers = testing_io::write_gpt_oss_checkpoint(dir.path(), d, false);
  const Checkpoint c = Checkpoint::open(dir.path());
  const LayerWeights w = c.layer_weights(0);
  EXPECT_EQ(w.router_weight.dtype, ElementType::bf16);
  EXPECT_EQ(w.router_weight.rows, 4);
  EXPECT_EQ(w.router_weight.cols, 64);
  EXPECT_EQ(w.b1.cols, 2 * 96);
  EXPECT_EQ(w.w1.rows, 2 * 96);
  EXPECT_EQ(w.w2.cols, 96);
  EXPECT_EQ(mxmoe::testing::Mxfp4Copy(w.w1).blocks, layers[0].w1_blocks);
  EXPECT_EQ(mxmoe::testing::Mxfp4Copy(w.w2).scales, layers[0].w2_scales);
  // Views into a mapping are stable: asking twice gives the same addresses.
  EXPECT_EQ(c.layer_weights(0).w1.row_blocks(0, 0), w.w1.row_blocks(0, 0));
}

TEST(GptOssCheckpoint, ShardedCopyLoadsTheSame) {
  TempDir single, sharded;
  const Dims d;
  testing_io::write_gpt_oss_checkpoint(single.path(), d, false);
  testing_io::write_gpt_oss_checkpoint(sharded.path(), d, true);
  const Checkpoint a = Checkpoint::open(single.path());
  const Checkpoint b = Checkpoint::open(sharded.path());
  const auto x = testing_io::random_input(5, d.hidden, 12);
  for (int layer = 0; layer < 2; ++layer) {
    EXPECT_EQ(a.layer_spec(layer).num_experts, b.layer_spec(layer).num_experts);
    EXPECT_EQ(run_layer(a, layer, x, 5), run_layer(b, layer, x, 5));  // bit for bit
  }
}

TEST(GptOssCheckpoint, LayerOutOfRangeIsAnError) {
  TempDir dir;
  testing_io::write_gpt_oss_checkpoint(dir.path(), Dims{}, false);
  const Checkpoint c = Checkpoint::open(dir.path());
  EXPECT_THROW((void)c.layer_spec(2), LoadError);
  EXPECT_THROW((void)c.layer_weights(-1), LoadError);
}

// Issue 38 (finding 11): `num_hidden_layers: 1` on a 2-layer checkpoint opened as a 1-layer
// model, layer 1 silently unread. Refused naming a tensor of the layer and the config value.
TEST(GptOssCheckpoint, TensorsOfALayerPastNumHiddenLayersAreRefused) {
  for (const bool sharded : {false, true}) {
    TempDir dir;
    const Dims d;
    testing_io::write_gpt_oss_checkpoint(dir.path(), d, sharded);
    nlohmann::json config = testing_io::gpt_oss_config(d);
    config["num_hidden_layers"] = 1;
    testing_io::write_config(dir.path(), config);
    EXPECT_THAT(open_error(dir.path()),
                AllOf(HasSubstr("tensor \"model.layers.1."), HasSubstr("is of layer 1"),
                      HasSubstr("num_hidden_layers 1")))
        << "sharded " << sharded;
    // num_nextn_predict_layers is DeepSeek's: it does not make room for a gpt-oss layer.
    config["num_nextn_predict_layers"] = 1;
    testing_io::write_config(dir.path(), config);
    EXPECT_THAT(open_error(dir.path()), HasSubstr("num_hidden_layers 1"));
  }
}

// Rewrites the single-file checkpoint with one tensor changed.
class CorruptedCheckpoint : public ::testing::Test {
 protected:
  void write_with(const std::function<void(std::vector<TensorToWrite>&)>& change) {
    const Dims d;
    layers_ = {testing_io::random_gpt_oss_layer(d, 1), testing_io::random_gpt_oss_layer(d, 2)};
    std::vector<TensorToWrite> all;
    for (int n = 0; n < 2; ++n)
      for (auto& t : testing_io::gpt_oss_tensors(d, n, layers_[static_cast<std::size_t>(n)]))
        all.push_back(t);
    change(all);
    testing_io::write_config(dir_.path(), testing_io::gpt_oss_config(d));
    write_safetensors(dir_ / "model.safetensors", all);
  }
  TensorToWrite& find(std::vector<TensorToWrite>& all, const std::string& name) {
    for (auto& t : all)
      if (t.name == name) return t;
    throw std::logic_error("no tensor " + name);
  }
  TempDir dir_;
  std::vector<testing_io::GptOssLayer> layers_;
  std::vector<std::uint8_t> scratch_;
};

TEST_F(CorruptedCheckpoint, ScaleByte0xFFNamesTensorAndIndex) {
  write_with([&](auto& all) {
    auto& t = find(all, "model.layers.1.mlp.experts.down_proj_scales");
    scratch_.assign(t.data.begin(), t.data.end());
    scratch_[77] = 0xFF;
    t.data = scratch_;
  });
  EXPECT_NO_THROW((void)Checkpoint::open(dir_.path()).layer_weights(0));  // lazy: layer 0 fine
  EXPECT_THAT(open_error(dir_.path()),
              AllOf(HasSubstr("model.layers.1.mlp.experts.down_proj_scales"), HasSubstr("index 77"),
                    HasSubstr("0xFF")));
}

// An expert-parallel rank scans the scales of its experts only (it reads no page of the
// others'): a bad scale in expert 3 stops the ranks holding expert 3, not the others.
TEST_F(CorruptedCheckpoint, ARankScansOnlyTheScalesOfItsExperts) {
  const Dims d;
  const std::size_t per_expert = static_cast<std::size_t>(d.hidden * (d.intermediate / 32));
  write_with([&](auto& all) {
    auto& t = find(all, "model.layers.1.mlp.experts.down_proj_scales");
    scratch_.assign(t.data.begin(), t.data.end());
    scratch_[3 * per_expert + 5] = 0xFF;  // expert 3, row 0, block 5
    t.data = scratch_;
  });
  const Checkpoint c = Checkpoint::open(dir_.path());
  EXPECT_NO_THROW((void)c.layer_weights(1, {{0, 3}}));
  EXPECT_NO_THROW((void)c.layer_weights(1, {{0, 1}, {2, 3}}));
  const auto error = [&](const std::vector<ExpertRange>& experts) {
    try {
      (void)c.layer_weights(1, experts);
    } catch (const LoadError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error({{1, 2}, {3, 4}}), AllOf(HasSubstr("down_proj_scales"), HasSubstr("expert 3")));
  EXPECT_THAT(error({{0, 4}}), HasSubstr("expert 3"));
  EXPECT_THAT(error({{2, 5}}), HasSubstr("outside the 4 experts"));
}

TEST_F(CorruptedCheckpoint, NanOrInfInBf16BiasIsRejected) {
  write_with([&](auto& all) {
    auto& t = find(all, "model.layers.0.mlp.experts.gate_up_proj_bias");
    scratch_.assign(t.data.begin(), t.data.end());
    scratch_[2 * 5] = 0x80;  // bf16 0x7F80 = +Inf at index 5
    scratch_[2 * 5 + 1] = 0x7F;
    t.data = scratch_;
  });
  EXPECT_THAT(open_error(dir_.path()),
              AllOf(HasSubstr("gate_up_proj_bias"), HasSubstr("NaN or Inf at index 5")));
}

TEST_F(CorruptedCheckpoint, WrongShapeNamesExpectedAndActual) {
  write_with([&](auto& all) {
    auto& t = find(all, "model.layers.0.mlp.experts.down_proj_bias");
    t.shape = {64, 4};
  });
  EXPECT_THAT(open_error(dir_.path()),
              AllOf(HasSubstr("down_proj_bias"), HasSubstr("shape [64, 4]"),
                    HasSubstr("expected [4, 64]")));
}

TEST_F(CorruptedCheckpoint, WrongDtypeIsNamed) {
  write_with([&](auto& all) {
    auto& t = find(all, "model.layers.0.mlp.experts.gate_up_proj_scales");
    t.dtype = StDtype::I8;
  });
  EXPECT_THAT(open_error(dir_.path()),
              AllOf(HasSubstr("gate_up_proj_scales"), HasSubstr("dtype I8, expected U8")));
  write_with([&](auto& all) {
    auto& t = find(all, "model.layers.1.mlp.router.weight");
    t.dtype = StDtype::F16;
  });
  EXPECT_THAT(open_error(dir_.path()),
              AllOf(HasSubstr("router.weight"), HasSubstr("dtype F16, expected BF16 or F32")));
}

TEST_F(CorruptedCheckpoint, MissingExpertTensorIsAnErrorNotAFallback) {
  write_with([&](auto& all) {
    std::erase_if(all, [](const TensorToWrite& t) {
      return t.name == "model.layers.1.mlp.experts.down_proj_blocks";
    });
  });
  EXPECT_THAT(open_error(dir_.path()),
              AllOf(HasSubstr("layer 1"), HasSubstr("missing tensor"),
                    HasSubstr("model.layers.1.mlp.experts.down_proj_blocks")));
}

TEST_F(CorruptedCheckpoint, F32RouterAndBiasesAreAccepted) {
  std::vector<std::uint8_t> f32_router;
  write_with([&](auto& all) {
    auto& t = find(all, "model.layers.0.mlp.router.weight");
    f32_router.resize(layers_[0].router_w.size() * 4);
    std::memcpy(f32_router.data(), layers_[0].router_w.data(), f32_router.size());
    t.dtype = StDtype::F32;
    t.data = f32_router;
  });
  const Checkpoint c = Checkpoint::open(dir_.path());
  const LayerWeights w = c.layer_weights(0);
  EXPECT_EQ(w.router_weight.dtype, ElementType::f32);
  EXPECT_FLOAT_EQ(w.router_weight.at(3), layers_[0].router_w[3]);
}

TEST(Bf16ExpertCheckpoint, OpenSaysToQuantizeFirst) {
  TempDir dir;
  const std::vector<std::uint8_t> w(32 * 64 * 2, 0x3f), r(4 * 64 * 2, 0x3f);
  testing_io::write_config(dir.path(), {{"model_type", "mixtral"},
                                        {"num_local_experts", 4},
                                        {"num_experts_per_tok", 2},
                                        {"hidden_size", 64},
                                        {"intermediate_size", 32},
                                        {"num_hidden_layers", 1}});
  const std::vector<TensorToWrite> t = {
      {"model.layers.0.mlp.gate.weight", StDtype::BF16, {4, 64}, r},
      {"model.layers.0.mlp.experts.0.gate_proj.weight", StDtype::BF16, {32, 64}, w}};
  write_safetensors(dir / "model.safetensors", t);
  EXPECT_THAT(open_error(dir.path()),
              AllOf(HasSubstr("not MXFP4"), HasSubstr("experts.0.gate_proj.weight"),
                    HasSubstr("mxmoe quantize")));
}

// The hub cache: models--org--name/blobs/<hash> holds the bytes, snapshots/<rev>/<name> is a
// relative link to ../../blobs/<hash>, for config.json, the index and every shard.
TEST(HubCache, ShardedSnapshotWithLinksIntoBlobsLoads) {
  namespace fs = std::filesystem;
  TempDir root;
  const fs::path repo = fs::path(root.path()) / "models--org--tiny";
  const fs::path staging = repo / "staging";
  fs::create_directories(staging);
  const Dims d;
  const auto layers = testing_io::write_gpt_oss_checkpoint(staging, d, /*sharded=*/true);
  const fs::path blobs = repo / "blobs", snapshot_dir = repo / "snapshots" / "0123abcd";
  fs::create_directories(blobs);
  fs::create_directories(snapshot_dir);
  int n = 0;
  for (const auto& e : fs::directory_iterator(staging)) {
    const std::string hash = "blob" + std::to_string(n++);
    fs::rename(e.path(), blobs / hash);
    fs::create_symlink(fs::path("../../blobs") / hash, snapshot_dir / e.path().filename());
  }
  ASSERT_EQ(n, 4);  // config.json, index, two shards

  const Checkpoint c = Checkpoint::open(snapshot_dir);
  ASSERT_EQ(c.num_layers(), 2);
  const int tokens = 5;
  const auto x = testing_io::random_input(tokens, d.hidden, 3);
  EXPECT_LT(testing_io::relative_l2(run_layer(c, 1, x, tokens),
                                    testing_io::gpt_oss_reference(d, layers[1], x, tokens)),
            2e-5);
}

// gpt-oss's swiglu_alpha (GptOssConfig) is honoured, not replaced by 1.702: a checkpoint
// written with alpha 1.0 matches the float64 layer with alpha 1.0, and not the one with 1.702.
TEST(ConfigFields, SwigluAlphaIsHonouredEndToEnd) {
  TempDir dir;
  Dims d;
  d.swiglu_alpha = 1.0;
  d.swiglu_limit = 5.0;
  const auto layers = testing_io::write_gpt_oss_checkpoint(dir.path(), d, /*sharded=*/false);
  const Checkpoint c = Checkpoint::open(dir.path());
  EXPECT_FLOAT_EQ(c.layer_spec(0).activation_params.alpha, 1.0f);
  EXPECT_FLOAT_EQ(c.layer_spec(0).activation_params.limit, 5.0f);
  const int tokens = 6;
  const auto x = testing_io::random_input(tokens, d.hidden, 5);
  const auto got = run_layer(c, 0, x, tokens);
  EXPECT_LT(testing_io::relative_l2(got, testing_io::gpt_oss_reference(d, layers[0], x, tokens)),
            2e-5);
  Dims old = d;
  old.swiglu_alpha = 1.702;
  EXPECT_GT(testing_io::relative_l2(got, testing_io::gpt_oss_reference(old, layers[0], x, tokens)),
            1e-3);
}

// transformers 5 writes num_local_experts for Qwen3-MoE (attribute_map): the checkpoint's
// config with either name gives the same layer.
TEST(ConfigFields, HuggingFaceKeyAliasesGiveTheSameLayer) {
  TempDir dir;
  const Dims d;
  testing_io::write_gpt_oss_checkpoint(dir.path(), d, /*sharded=*/false);
  nlohmann::json config = testing_io::gpt_oss_config(d);
  const LayerSpec canonical = Checkpoint::open(dir.path()).layer_spec(0);
  config.erase("num_local_experts");
  config["num_experts"] = d.experts;  // GptOssConfig.attribute_map
  config.erase("num_experts_per_tok");
  testing_io::write_config(dir.path(), config);  // experts_per_token stays (OpenAI's name)
  EXPECT_EQ(Checkpoint::open(dir.path()).layer_spec(0), canonical);
}

}  // namespace
}  // namespace mxmoe
