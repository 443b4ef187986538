// The edges of the io room: checkpoints as Hugging Face caches them (snapshots/<rev>/ with
// links into ../../blobs/), only regular files read (a FIFO config is refused at once),
// swiglu_alpha honoured end to end, writes whole or not at all, transactional quantize.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "io_fixtures.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/npy.hpp"
#include "test_runtime.hpp"

namespace mxmoe {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing_io::Dims;
using testing_io::TempDir;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

using testing_io::temporaries_in;

// Layer N through the reference backend, float32 activations (see checkpoint_test.cpp for
// the 2e-5 bound: float32 accumulation only).
std::vector<float> run_layer(const Checkpoint& c, int layer, const std::vector<float>& x,
                             int tokens) {
  Request request;
  request.activation = ActivationFormat::f32;
  request.forced_backend = "reference";
  const LayerWeights w = c.layer_weights(layer);
  MoeLayer moe = make_layer(c.layer_spec(layer), w, probe_hardware(), request,
                            mxmoe::testing::test_runtime(2));
  std::vector<float> y(x.size());
  moe.forward(x.data(), tokens, y.data());
  return y;
}

// The hub cache: models--org--name/blobs/<hash> holds the bytes, snapshots/<rev>/<name> is a
// relative link to ../../blobs/<hash>, for config.json, the index and every shard.
TEST(HubCache, ShardedSnapshotWithLinksIntoBlobsLoads) {
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

// config.json as a FIFO would block a reader forever; it is refused at once, by name.
TEST(RegularFilesOnly, FifoConfigIsRefusedImmediately) {
  TempDir dir;
  testing_io::write_gpt_oss_checkpoint(dir.path(), Dims{}, /*sharded=*/false);
  fs::remove(dir / "config.json");
  ASSERT_EQ(::mkfifo((dir / "config.json").c_str(), 0600), 0);
  try {
    (void)Checkpoint::open(dir.path());
    FAIL() << "a FIFO config.json was read";
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("config.json"), HasSubstr("not a regular file")));
  }
  // The same for an input .npy and a device.
  ASSERT_EQ(::mkfifo((dir / "x.npy").c_str(), 0600), 0);
  EXPECT_THROW(read_npy(dir / "x.npy"), LoadError);
  try {
    (void)read_npy("/dev/zero");
    FAIL();
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("a character device"));
  }
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

// Writes land whole or not at all: a write that cannot happen names the OS reason and leaves
// nothing behind; a successful one replaces the file and leaves no temporary.
TEST(AtomicWrites, NpyWriteIntoAnUnwritablePlaceKeepsNothingAndNamesTheReason) {
  TempDir dir;
  const std::vector<float> data = {1, 2, 3, 4};
  const std::int64_t shape[] = {2, 2};
  write_npy(dir / "y.npy", data, shape);
  const std::string before = slurp(dir / "y.npy");
  try {
    write_npy(dir / "missing_dir/y.npy", data, shape);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("cannot create"), HasSubstr("No such file")));
  }
  const std::vector<float> other = {5, 6, 7, 8};
  write_npy(dir / "y.npy", other, shape);
  EXPECT_NE(slurp(dir / "y.npy"), before);
  EXPECT_EQ(read_npy(dir / "y.npy").data, other);
  EXPECT_EQ(temporaries_in(dir.path()), 0);
}

}  // namespace
}  // namespace mxmoe
