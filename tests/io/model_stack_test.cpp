// mxmoe::Model: the MoE stack of a checkpoint on one Runtime, layers bound on first use.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "io_fixtures.hpp"
#include "mxmoe/model.hpp"
#include "test_runtime.hpp"

namespace mxmoe {
namespace {

using ::testing::HasSubstr;
using testing_io::Dims;
using testing_io::TempDir;

Request reference_f32() {
  Request r;
  r.activation = ActivationFormat::f32;
  r.forced_backend = "reference";
  return r;
}

Hardware test_hardware() {
  Hardware hw = probe_hardware();
  hw.logical_cpus = 2;
  return hw;
}

TEST(Model, BindsLayersOnFirstUseAndMatchesFloat64) {
  TempDir dir;
  Dims d;
  d.layers = 3;
  const auto layers = testing_io::write_gpt_oss_checkpoint(dir.path(), d, /*sharded=*/true);
  Model model(dir.path(), test_hardware(), mxmoe::testing::test_runtime(2),
              ModelOptions{reference_f32(), false});
  EXPECT_EQ(model.num_layers(), 3);
  EXPECT_EQ(model.moe_layers(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(model.skip_reason(2), "");
  EXPECT_EQ(model.bound_layers(), 0);  // nothing packed at open

  const std::vector<float> x = testing_io::random_input(5, d.hidden, 4);
  for (int n : {2, 0}) {
    MoeLayer& layer = model.layer(n);
    EXPECT_EQ(&layer, &model.layer(n));  // kept, not bound again
    std::vector<float> y(x.size());
    layer.forward({.tokens = 5, .x = x.data(), .y = y.data()});
    const std::vector<double> want =
        testing_io::gpt_oss_reference(d, layers[static_cast<std::size_t>(n)], x, 5);
    // f32 activations on the reference backend: only float32 accumulation differs.
    EXPECT_LT(testing_io::relative_l2(y, want), 2e-5) << "layer " << n;
  }
  EXPECT_EQ(model.bound_layers(), 2);

  // bind() gives a fresh layer with another request; same weights, same math.
  Request bf16 = reference_f32();
  bf16.activation = ActivationFormat::bf16;
  MoeLayer other = model.bind(0, bf16);
  EXPECT_EQ(*other.selection().deployment.request.activation, ActivationFormat::bf16);
  EXPECT_EQ(model.bound_layers(), 2);

  EXPECT_THROW(model.layer(3), LoadError);
  EXPECT_THROW(model.skip_reason(-1), LoadError);
}

TEST(Model, EagerBindsEveryMoeLayerAtOpen) {
  TempDir dir;
  const Dims d;
  testing_io::write_gpt_oss_checkpoint(dir.path(), d, /*sharded=*/false);
  const Model model(dir.path(), test_hardware(), mxmoe::testing::test_runtime(1),
                    ModelOptions{reference_f32(), true});
  EXPECT_EQ(model.bound_layers(), d.layers);
}

TEST(Model, DenseLayersAreListedWithTheirReason) {
  TempDir dir;
  Dims d;
  d.layers = 2;
  testing_io::write_gpt_oss_checkpoint(dir.path(), d, /*sharded=*/false);
  // The same tensors under a Qwen3-MoE config whose layer 0 is a dense MLP.
  testing_io::write_config(dir.path(), {{"model_type", "qwen3_moe"},
                                        {"num_experts", d.experts},
                                        {"num_experts_per_tok", d.top_k},
                                        {"hidden_size", d.hidden},
                                        {"moe_intermediate_size", d.intermediate},
                                        {"intermediate_size", 4 * d.hidden},
                                        {"num_hidden_layers", d.layers},
                                        {"norm_topk_prob", true},
                                        {"decoder_sparse_step", 1},
                                        {"mlp_only_layers", {0}},
                                        {"quantization_config", {{"quant_method", "mxfp4"}}}});
  Model model(dir.path(), test_hardware(), mxmoe::testing::test_runtime(1),
              ModelOptions{reference_f32(), false});
  EXPECT_EQ(model.moe_layers(), std::vector<int>{1});
  EXPECT_THAT(model.skip_reason(0), HasSubstr("mlp_only_layers"));
  EXPECT_THROW(model.layer(0), LoadError);
}

// Resident file-backed memory of this process, from /proc/self/status (kB).
long rss_file_kb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
  return -1;
}

std::uint64_t touch(const Mxfp4View& v) {
  std::uint64_t sum = 0;
  for (std::int64_t e = 0; e < v.experts; ++e)
    for (std::int64_t r = 0; r < v.rows; ++r) {
      const std::uint8_t* b = v.row_blocks(e, r);
      for (std::int64_t i = 0; i < v.row_bytes(); ++i) sum = sum * 31 + b[i];
      sum = sum * 31 + *v.row_scale(e, r);
    }
  return sum;
}

// A backend that packs its own copy computes from it: binding drops the checkpoint's resident
// pages of the experts (the mapping would otherwise count them a second time), and the bytes
// still read back unchanged from the file.
TEST(Model, PackingBackendReleasesTheMappedExpertPages) {
  TempDir dir;
  Dims d;
  d.experts = 16, d.hidden = 512, d.intermediate = 512, d.layers = 1;  // 6.5 MB of experts
  testing_io::write_gpt_oss_checkpoint(dir.path(), d, /*sharded=*/false);
  Request request;
  request.activation = ActivationFormat::f32;
  Model model(dir.path(), test_hardware(), mxmoe::testing::test_runtime(1),
              ModelOptions{request, false});
  // Binding once first pages in the packing code, whose file-backed text pages would
  // otherwise count in RssFile below (an ASan build's are megabytes).
  try {
    (void)model.bind(0, request);
  } catch (const NoBackendError&) {
    GTEST_SKIP() << "no packing backend in this build (a portable one has only the reference)";
  }
  const LayerWeights views = model.checkpoint().layer_weights(0);
  const std::uint64_t before = touch(views.w1) ^ (touch(views.w2) << 1);
  const long touched = rss_file_kb();
  const MoeLayer& layer = model.layer(0);
  if (layer.packed_weight_bytes() == 0)
    GTEST_SKIP() << layer.selection().chosen << " computes from the mapping itself";
  const long released = rss_file_kb();
  const long expert_kb = static_cast<long>(views.w1.bytes() + views.w2.bytes()) / 1024;
  EXPECT_LT(released, touched - expert_kb * 9 / 10)
      << "RssFile " << touched << " kB before binding, " << released << " after";
  EXPECT_EQ(touch(views.w1) ^ (touch(views.w2) << 1), before);  // read back from the file
}

// A shard truncated after the checkpoint was opened: every read of its lost pages would be a
// bus error (SIGBUS kills the process). Binding, and computing from the mapping, are instead a
// LoadError naming the file; a layer whose backend packed its copy never reads the file again.
std::string shard_of_layer(int n, int layers) {
  return "model-0000" + std::to_string(n + 1) + "-of-0000" + std::to_string(layers) +
         ".safetensors";
}

void truncate_file(const std::string& path) {
  ASSERT_EQ(::truncate(path.c_str(), 0), 0) << path;
}

// A gpt-oss checkpoint of d.layers shards in DIR, opened lazily for REQUEST on two threads.
Model sharded_model(const TempDir& dir, const Dims& d, const Request& request) {
  testing_io::write_gpt_oss_checkpoint(dir.path(), d, /*sharded=*/true);
  return Model(dir.path(), test_hardware(), mxmoe::testing::test_runtime(2),
               ModelOptions{request, false});
}

TEST(Model, ShardTruncatedAfterOpenIsALoadErrorNamingItAtBind) {
  TempDir dir;
  Dims d;
  d.layers = 2;
  Model model = sharded_model(dir, d, reference_f32());
  const std::string shard = shard_of_layer(1, d.layers);
  truncate_file(dir.path() + "/" + shard);
  try {
    (void)model.layer(1);
    FAIL() << "bound a layer from a truncated shard";
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr(shard));
    EXPECT_THAT(e.what(), HasSubstr("changed on disk"));
  }
  EXPECT_THROW((void)model.layer(1), LoadError);  // still, not zeros
  (void)model.layer(0);                            // the other shard is whole
}

TEST(Model, ReferenceLayerReadingATruncatedShardThrowsAtEveryForward) {
  TempDir dir;
  Dims d;
  d.layers = 1;
  Model model = sharded_model(dir, d, reference_f32());
  MoeLayer& layer = model.layer(0);
  ASSERT_TRUE(layer.reads_weight_views());
  const std::vector<float> x = testing_io::random_input(3, d.hidden, 4);
  std::vector<float> y(x.size());
  layer.forward({.tokens = 3, .x = x.data(), .y = y.data()});
  const std::string shard = shard_of_layer(0, d.layers);
  truncate_file(dir.path() + "/" + shard);
  for (int call = 0; call < 2; ++call) {
    try {
      layer.forward({.tokens = 3, .x = x.data(), .y = y.data()});
      FAIL() << "computed from a truncated shard (call " << call << ")";
    } catch (const LoadError& e) {
      EXPECT_THAT(e.what(), HasSubstr(shard));
    }
  }
}

TEST(Model, PackedLayerNeverReadsItsShardAgain) {
  TempDir dir;
  Dims d;
  d.layers = 1;
  Request request;
  request.activation = ActivationFormat::f32;
  Model model = sharded_model(dir, d, request);
  MoeLayer* layer = nullptr;
  try {
    layer = &model.layer(0);
  } catch (const NoBackendError&) {
    GTEST_SKIP() << "no packing backend in this build";
  }
  if (layer->reads_weight_views()) GTEST_SKIP() << layer->selection().chosen << " reads views";
  const std::vector<float> x = testing_io::random_input(3, d.hidden, 4);
  std::vector<float> before(x.size()), after(x.size());
  layer->forward({.tokens = 3, .x = x.data(), .y = before.data()});
  truncate_file(dir.path() + "/" + shard_of_layer(0, d.layers));
  layer->forward({.tokens = 3, .x = x.data(), .y = after.data()});
  EXPECT_EQ(before, after);
}

}  // namespace
}  // namespace mxmoe
