// The seed's scenario, end to end through the `mxmoe` executable (docs/SCENARIOS.md):
// DeepSeek-V4-Flash's layer shape shrunk, a checkpoint in the release naming (FP4 experts,
// FP8 shared expert, one hash layer and one routed layer) made with `mxmoe synth`, then
// exactly the scenario's three commands:
//   1. mxmoe explain --model DIR --layer 1 --batch-invariant --activation mxfp8
//   2. mxmoe run --model DIR --layers all --batch-invariant --activation mxfp8
//   3. mxmoe verify --model DIR --layer 0,1 --batch-invariant --activation mxfp8
// and the --token-ids edge of `run`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "io/io_fixtures.hpp"
#include "io/npy.hpp"
#include "mxmoe/hardware.hpp"

namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

struct Result {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class V4Scenario : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("mxmoe_v4_scenario_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const Result g =
        run("synth --preset deepseek-v4-flash --experts 16 --top-k 4 --hidden 256 "
            "--intermediate 128 --layers 2 --hash-layers 1 --vocab 1000 --out " +
            model().string());
    ASSERT_EQ(g.rc, 0) << g.err;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static fs::path model() { return dir_ / "v4"; }
  // `env -i`: the developer's MXMOE_* variables cannot change the verdicts.
  static Result run(const std::string& args) {
    const fs::path out = dir_ / "out.txt", err = dir_ / "err.txt";
    const std::string cmd = "env -i PATH=/usr/bin:/bin " + std::string(MXMOE_CLI_PATH) + " " +
                            args + " >" + out.string() + " 2>" + err.string();
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  }
  static std::string fast_bf16_backend() {
    const mxmoe::Hardware hw = mxmoe::probe_hardware();
    if (mxmoe::isa_feature(hw.isa, "amx_bf16").value_or(false) && hw.os_denied.empty())
      return "amx_bf16";
    if (mxmoe::isa_feature(hw.isa, "avx512_bf16").value_or(false)) return "avx512_bf16";
    return "";
  }
  // Where no backend computes MXFP8 activations (AVX2-only CPUs), the scenario's commands
  // must refuse with every reason (exit 3) and a remedy naming bf16; the scenario then runs
  // with --activation bf16 on the backend the oracle picks for it.
  static std::string activation_here() { return fast_bf16_backend().empty() ? "bf16" : "mxfp8"; }
  static fs::path dir_;
};
fs::path V4Scenario::dir_;

TEST_F(V4Scenario, TheReleaseNamingWasWritten) {
  const nlohmann::json config = nlohmann::json::parse(slurp(model() / "config.json"));
  EXPECT_EQ(config.at("model_type"), "deepseek_v4");
  EXPECT_EQ(config.at("mlp_layer_types"), nlohmann::json({"hash_moe", "moe"}));
  EXPECT_EQ(config.at("quantization_config").at("quant_method"), "fp8");
  const Result info = run("info --model " + model().string() + " --json");
  ASSERT_EQ(info.rc, 0) << info.err;
  const nlohmann::json j = nlohmann::json::parse(info.out);
  EXPECT_EQ(j.at("tensor_naming"), "deepseek_v4 (release)");
  EXPECT_EQ(j.at("shared_weight_format"), "fp8_e4m3");
  EXPECT_EQ(j.at("hash_layers"), 1);
  EXPECT_EQ(j.at("per_layer")[0].at("routing"), "hash");
  EXPECT_EQ(j.at("per_layer")[1].at("routing"), "sqrtsoftplus_topk");
}

// 1. The oracle picks a fast backend for MXFP8 + batch invariance, and gives every other
// candidate's reasons.
TEST_F(V4Scenario, ExplainSelectsAFastBackend) {
  const Result r = run("explain --model " + model().string() +
                       " --layer 1 --batch-invariant --activation mxfp8");
  const std::string fast = fast_bf16_backend();
  if (fast.empty()) {  // no AVX-512 BF16 or AMX: refused, every reason kept, bf16 as remedy
    EXPECT_EQ(r.rc, 3) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("selected: none"));
    EXPECT_THAT(r.out, HasSubstr("activation format mxfp8 is not implemented"));
    EXPECT_THAT(r.out, HasSubstr("activation=bf16"));
    EXPECT_THAT(r.out, HasSubstr("reference_only"));
    const Result bf16 = run("explain --model " + model().string() +
                            " --layer 1 --batch-invariant --activation bf16");
    ASSERT_EQ(bf16.rc, 0) << bf16.out << bf16.err;
    EXPECT_THAT(bf16.out, HasSubstr("selected: avx2"));
    return;
  }
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("selected: " + fast));
  EXPECT_THAT(r.out, HasSubstr("avx512_vnni"));  // a refused candidate, with its reason
  EXPECT_THAT(r.out, HasSubstr("activation_format"));
  const Result j = run("explain --json --model " + model().string() +
                       " --layer 1 --batch-invariant --activation mxfp8");
  ASSERT_EQ(j.rc, 0) << j.err;
  const nlohmann::json e = nlohmann::json::parse(j.out);
  EXPECT_EQ(e.at("selected"), fast);
  EXPECT_NE(e.at("selected"), "reference");
  for (const auto& c : e.at("candidates")) {
    if (!c.at("supported").get<bool>()) {
      EXPECT_FALSE(c.at("reasons").empty()) << c.at("name");
    }
  }
}

// 2. Both layers run, each on the fast backend, the hash layer with token ids: one step
// through the model's MoE layers (--layers all), and each layer alone (--layer N).
TEST_F(V4Scenario, RunRunsTheHashAndTheRoutedLayer) {
  std::string fast = fast_bf16_backend();
  const std::string act = activation_here();
  if (fast.empty()) {
    const Result refused = run("run --model " + model().string() +
                               " --layers all --batch-invariant --activation mxfp8 --tokens 8");
    EXPECT_EQ(refused.rc, 3) << refused.out << refused.err;
    fast = "avx2_int16";  // the oracle's bf16 choice on an AVX2-only CPU
  }
  const Result r = run("run --model " + model().string() + " --layers all --batch-invariant " +
                       "--activation " + act + " --tokens 8 --reps 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("layer 0 is hash-routed: random token ids in [0, 1000)"));
  EXPECT_THAT(r.out, HasSubstr("layers: 0 (" + fast + "), 1 (" + fast + ")"));
  const Result hash = run("run --model " + model().string() + " --layer 0 --batch-invariant " +
                          "--activation " + act + " --tokens 8 --reps 2");
  ASSERT_EQ(hash.rc, 0) << hash.err;
  EXPECT_THAT(hash.out, HasSubstr("hash-routed by token id over 1000 ids"));
  EXPECT_THAT(hash.out, HasSubstr("chosen: " + fast));
  EXPECT_THAT(hash.out, HasSubstr("batch_invariant=true"));
}

// 3. verify: every selectable backend against float64, and bit identity across batches.
TEST_F(V4Scenario, VerifyPasses) {
  const Result r = run("verify --model " + model().string() +
                       " --layer 0,1 --batch-invariant --activation " + activation_here() +
                       " --threads 2");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("hash-routed by token id"));
  EXPECT_THAT(r.out, HasSubstr("identical bits"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("FAIL")));
  const std::string fast = fast_bf16_backend();
  if (!fast.empty()) {
    EXPECT_THAT(r.out, HasSubstr(fast));
  }
}

TEST_F(V4Scenario, TokenIdsOfTheHashLayer) {
  const fs::path x = dir_ / "x.npy", y32 = dir_ / "y32.npy", y64 = dir_ / "y64.npy";
  std::vector<float> xs(3 * 256);
  for (std::size_t i = 0; i < xs.size(); ++i)
    xs[i] = static_cast<float>((i * 37) % 17) / 8.0f - 1.0f;
  const std::int64_t shape[] = {3, 256};
  mxmoe::write_npy(x.string(), xs, shape);
  mxmoe::testing_io::write_int_npy(dir_ / "ids32.npy", {5, 999, 5}, false);
  mxmoe::testing_io::write_int_npy(dir_ / "ids64.npy", {5, 999, 5}, true);
  mxmoe::testing_io::write_int_npy(dir_ / "bad.npy", {5, 1000, 5}, true);
  mxmoe::testing_io::write_int_npy(dir_ / "short.npy", {5, 6}, false);
  const std::string base = "run --model " + model().string() + " --layer 0 --reps 1 --input " +
                           x.string() + " --activation f32 --backend reference";
  // A hash layer with real inputs and no ids is a usage error.
  Result r = run(base);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("layer 0 is hash-routed"));
  EXPECT_THAT(r.err, HasSubstr("--token-ids"));
  // Bad ids are bad input (exit 1), named by token.
  r = run(base + " --token-ids " + (dir_ / "bad.npy").string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("token id 1000 of token 1 is out of range [0, 1000)"));
  r = run(base + " --token-ids " + (dir_ / "short.npy").string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("expected shape [3]"));
  ASSERT_EQ(
      run(base + " --token-ids " + (dir_ / "ids32.npy").string() + " --output " + y32.string()).rc,
      0);
  ASSERT_EQ(
      run(base + " --token-ids " + (dir_ / "ids64.npy").string() + " --output " + y64.string()).rc,
      0);
  const mxmoe::NpyArray a = mxmoe::read_npy(y32.string()), b = mxmoe::read_npy(y64.string());
  ASSERT_EQ(a.data.size(), xs.size());
  EXPECT_EQ(std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)), 0);
  // Tokens 0 and 2 share id 5 but not x: different outputs, but finite and nonzero.
  EXPECT_NE(std::memcmp(a.data.data(), a.data.data() + 512, 256 * sizeof(float)), 0);
  // One step through both layers (--layers): the hash layer's slice has the bits of its own
  // run; without ids and with a real input it is the same usage error.
  const fs::path stacked = dir_ / "stacked.npy";
  const std::string stack = "run --model " + model().string() + " --layers all --reps 1 --input " +
                            x.string() + " --activation f32 --backend reference";
  EXPECT_EQ(run(stack).rc, 2);
  ASSERT_EQ(
      run(stack + " --token-ids " + (dir_ / "ids32.npy").string() + " --output " + stacked.string())
          .rc,
      0);
  const mxmoe::NpyArray st = mxmoe::read_npy(stacked.string());
  ASSERT_EQ(st.data.size(), 2 * xs.size());
  EXPECT_EQ(std::memcmp(st.data.data(), a.data.data(), a.data.size() * sizeof(float)), 0);
  // The routed layer ignores ids, and runs without them.
  EXPECT_EQ(run("run --model " + model().string() + " --layer 1 --reps 1 --input " + x.string()).rc,
            0);
}

}  // namespace
