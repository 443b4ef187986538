// `mxmoe generate`'s pieces: config.json written for a LayerSpec reads back as that spec
// for every family, and a generated checkpoint loads and computes what its in-memory
// weights compute, written whole or not at all.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "io/checkpoint_writer.hpp"
#include "io_fixtures.hpp"
#include "model/config_writer.hpp"
#include "model/model_config.hpp"
#include "mxmoe/model.hpp"
#include "test_runtime.hpp"

namespace mxmoe {
namespace {

namespace fs = std::filesystem;
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
    EXPECT_EQ(c.moe, spec);
    EXPECT_EQ(c.num_layers, 3);
    for (const std::string& why : c.non_moe_reason) EXPECT_EQ(why, "");
    EXPECT_EQ(parse_model_config(model_config_json(small(name), 1), "test", name).moe, small(name));
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
    io::GenerateOptions o;
    o.layers = 2;
    o.seed = 40;
    io::generate_checkpoint(out, spec, o);
    Request r;
    r.activation = ActivationFormat::f32;
    r.forced_backend = "reference";
    Model model(out, probe_hardware(), mxmoe::testing::test_runtime(1), ModelOptions{r, false});
    ASSERT_EQ(model.moe_layers(), (std::vector<int>{0, 1}));
    const std::vector<float> x = testing_io::random_input(7, spec.hidden, 3);
    for (int n = 0; n < 2; ++n) {
      std::vector<float> from_file(x.size()), in_memory(x.size());
      model.layer(n).forward(x.data(), 7, from_file.data());
      const LayerStorage storage = LayerStorage::random(spec, 40 + static_cast<std::uint64_t>(n));
      MoeLayer direct =
          make_layer(spec, storage.weights(), probe_hardware(), r, mxmoe::testing::test_runtime(1));
      direct.forward(x.data(), 7, in_memory.data());
      EXPECT_EQ(std::memcmp(from_file.data(), in_memory.data(), x.size() * sizeof(float)), 0)
          << "layer " << n;
    }
  }
}

TEST(Generate, WritesWholeOrNothing) {
  TempDir dir;
  const std::string out = dir / "model";
  io::GenerateOptions o;
  o.layers = 2;
  io::generate_checkpoint(out, small("mixtral-8x7b"), o);
  std::ofstream(out + "/stale.safetensors") << "x";
  // Without --force an existing directory is refused and left as it was.
  EXPECT_THROW(io::generate_checkpoint(out, small("mixtral-8x7b"), o), LoadError);
  EXPECT_TRUE(fs::exists(out + "/stale.safetensors"));
  // With --force it is replaced as a whole: nothing of the old one stays.
  o.force = true;
  o.layers = 1;
  io::generate_checkpoint(out, small("mixtral-8x7b"), o);
  EXPECT_FALSE(fs::exists(out + "/stale.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  // A spec the config cannot express fails before anything is written.
  LayerSpec bad = small("mixtral-8x7b");
  bad.expert_bias = true;
  EXPECT_THROW(io::generate_checkpoint(dir / "other", bad, o), std::invalid_argument);
  EXPECT_FALSE(fs::exists(dir / "other"));
  for (const auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_THAT(entry.path().filename().string(), ::testing::Not(::testing::HasSubstr(".tmp-")));
}

}  // namespace
}  // namespace mxmoe
