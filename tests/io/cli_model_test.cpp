// End to end through the mxmoe executable: a gpt-oss-layout checkpoint directory and x.npy
// written here -> `mxmoe run --model DIR --layer 1` -> y.npy matches the float64 evaluation;
// `mxmoe info --model DIR --json` describes it. Skipped when the executable is not built.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "io/npy.hpp"
#include "io_fixtures.hpp"

namespace mxmoe {
namespace {

using testing_io::Dims;
using testing_io::TempDir;

// Runs the executable with ARGS; returns (exit code, stdout [+ stderr when merged]).
std::pair<int, std::string> run_cli(const std::string& args, bool merge_stderr = false) {
  const std::string command =
      std::string(MXMOE_CLI_COMMAND) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  while (pipe && std::fgets(buffer, sizeof buffer, pipe)) out += buffer;
  const int status = pipe ? ::pclose(pipe) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string slurp_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class CliModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(MXMOE_CLI_PATH))
      GTEST_SKIP() << "the mxmoe executable is not built: " << MXMOE_CLI_PATH;
  }
};

TEST_F(CliModel, RunModelLayerMatchesFloat64Evaluation) {
  TempDir dir, io;
  const Dims d;
  const auto layers = testing_io::write_gpt_oss_checkpoint(dir.path(), d, /*sharded=*/true);
  const int tokens = 7;
  const auto x = testing_io::random_input(tokens, d.hidden, 99);
  const std::vector<std::int64_t> shape = {tokens, d.hidden};
  write_npy(io / "x.npy", x, shape);
  const auto [rc, out] =
      run_cli("run --model " + dir.path() + " --layer 1 --input " + (io / "x.npy") + " --output " +
              (io / "y.npy") + " --backend reference --activation f32 --threads 1");
  ASSERT_EQ(rc, 0) << out;
  const NpyArray y = read_npy(io / "y.npy");
  EXPECT_EQ(y.shape, shape);
  // Reference backend, float32 activations: only float32 accumulation differs (see
  // checkpoint_test.cpp for the bound).
  EXPECT_LT(testing_io::relative_l2(y.data, testing_io::gpt_oss_reference(d, layers[1], x, tokens)),
            2e-5);
}

TEST_F(CliModel, InfoModelJsonDescribesTheCheckpoint) {
  TempDir dir;
  testing_io::write_gpt_oss_checkpoint(dir.path(), Dims{}, /*sharded=*/true);
  const auto [rc, out] = run_cli("info --model " + dir.path() + " --json");
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["family"], "gpt_oss");
  EXPECT_EQ(j["experts"], 4);
  EXPECT_EQ(j["top_k"], 2);
  EXPECT_EQ(j["hidden"], 64);
  EXPECT_EQ(j["intermediate"], 96);
  EXPECT_EQ(j["layers"], 2);
  EXPECT_EQ(j["shards"], 2);
  EXPECT_EQ(j["tensors"], 16);
  EXPECT_EQ(j["per_layer"][1]["status"], "ok");
  EXPECT_TRUE(j["weight_formats"].contains("U8"));
}

// Bug fixed: --model with --hardware --json printed two JSON documents one after the other.
TEST_F(CliModel, InfoModelAndHardwareJsonIsOneDocument) {
  TempDir dir;
  testing_io::write_gpt_oss_checkpoint(dir.path(), Dims{}, /*sharded=*/false);
  const auto [rc, out] = run_cli("info --model " + dir.path() + " --hardware --json");
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);  // throws on a second document
  EXPECT_EQ(j["family"], "gpt_oss");
  ASSERT_TRUE(j.contains("hardware"));
  EXPECT_TRUE(j["hardware"].contains("isa"));
  EXPECT_GT(j["hardware"]["logical_cpus"].get<int>(), 0);
}

TEST_F(CliModel, MalformedCheckpointFailsWithTheFileNamed) {
  TempDir dir;
  testing_io::write_gpt_oss_checkpoint(dir.path(), Dims{}, /*sharded=*/false);
  testing_io::write_bytes(dir / "model.safetensors", "tiny");
  const auto [rc, out] = run_cli("info --model " + dir.path(), /*merge_stderr=*/true);
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, ::testing::HasSubstr("model.safetensors: file is 4 bytes"));
  // quantize refuses a checkpoint that is already MXFP4.
  const auto [rc2, out2] =
      run_cli("quantize --model " + dir.path() + " --out " + dir / "q", /*merge_stderr=*/true);
  EXPECT_EQ(rc2, 1);
  EXPECT_THAT(out2, ::testing::HasSubstr("already MXFP4"));
}

// `run` on the reference backend reads the mapping at every call: a shard truncated while it
// times its calls ends it with exit 1 and the file named (it was SIGBUS, exit 135).
TEST_F(CliModel, ShardTruncatedWhileRunRunsIsExit1NamingIt) {
  TempDir dir, io;
  Dims d;
  d.layers = 1;
  testing_io::write_gpt_oss_checkpoint(dir.path(), d, /*sharded=*/true);
  const std::string shard = dir.path() + "/model-00001-of-00001.safetensors";
  const std::string err = (io / "err.txt");
  const std::string command = std::string(MXMOE_CLI_COMMAND) + " run --model " + dir.path() +
                              " --layer 0 --tokens 4 --reps 100000 --backend reference "
                              "--activation f32 --threads 1 >/dev/null 2>" + err;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_GT(pid, 0);
  // Truncate once the timed calls have begun (the layer is bound and computing).
  for (int i = 0; i < 3000 && slurp_text(err).find("timing") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::filesystem::resize_file(shard, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string text = slurp_text(err);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal: " << text;
  EXPECT_EQ(WEXITSTATUS(status), 1) << text;
  EXPECT_NE(text.find("model-00001-of-00001.safetensors: the file changed on disk"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace mxmoe
