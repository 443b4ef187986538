// The oracle's commands through the built `mxmoe` binary: exit codes, JSON shape, replay of
// a captured probe, flag-over-environment precedence. Few and fast: each runs the binary
// once or twice.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mxmoe/hardware.hpp"

namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

struct Result {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::filesystem::path temp_dir() {
  static const std::filesystem::path dir = [] {
    auto d =
        std::filesystem::temp_directory_path() / ("mxmoe_cli_oracle_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Removes the scratch folder when the suite ends.
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir(), ec);
  }
};
const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

// Runs `env -i PATH=... <env> mxmoe <args>`: a clean environment, so MXMOE_* variables of
// the developer's shell cannot change the verdicts.
Result run(const std::string& env, const std::string& args) {
  const auto out = temp_dir() / "out.txt", err = temp_dir() / "err.txt";
  const std::string cmd = "env -i PATH=/usr/bin:/bin " + env + " " + MXMOE_CLI_PATH + " " + args +
                          " >" + out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

Json explain_json(const std::string& env, const std::string& args, int expected_rc = 0) {
  const Result r = run(env, "explain --json " + args);
  EXPECT_EQ(r.rc, expected_rc) << r.err;
  return Json::parse(r.out);
}

TEST(CliExplain, JsonListsEveryCandidateWithItsReasons) {
  const Json j = explain_json("", "--preset gpt-oss-20b");
  ASSERT_TRUE(j.at("selected").is_string());
  EXPECT_TRUE(j.at("error").is_null());
  bool chosen_is_supported = false;
  for (const Json& c : j.at("candidates")) {
    EXPECT_TRUE(c.contains("name") && c.contains("supported") && c.contains("reasons"));
    if (c.at("name") == j.at("selected")) chosen_is_supported = c.at("supported").get<bool>();
    for (const Json& r : c.at("reasons"))
      for (const char* key : {"code", "detail", "required", "actual", "remedy"})
        EXPECT_TRUE(r.contains(key)) << key;
  }
  EXPECT_TRUE(chosen_is_supported);
  EXPECT_EQ(j.at("deployment").at("request").at("activation"), "bf16");  // family default
}

// A probe captured on a CPU without AVX-512/AMX gives the verdicts that CPU would give:
// the same as capping this machine's probe at avx2.
TEST(CliExplain, ReplayedHardwareWithoutAvx512MatchesTheCap) {
  const Result probe = run("", "info --hardware --json");
  ASSERT_EQ(probe.rc, 0) << probe.err;
  mxmoe::Hardware h = mxmoe::hardware_from_json(probe.out);
  EXPECT_TRUE(h.isa.avx2);  // this machine has AVX2
  h.isa = mxmoe::cap_isa(h.isa, "avx2");
  const auto file = temp_dir() / "haswell.json";
  std::ofstream(file) << mxmoe::to_json(h);

  const Json replayed = explain_json("", "--hardware " + file.string());
  const Json capped = explain_json("MXMOE_MAX_ISA=avx2", "");
  ASSERT_EQ(replayed.at("candidates").size(), capped.at("candidates").size());
  bool some_needed_avx512 = false;
  for (std::size_t i = 0; i < replayed.at("candidates").size(); ++i) {
    const Json& a = replayed.at("candidates")[i];
    EXPECT_EQ(a.at("supported"), capped.at("candidates")[i].at("supported")) << a.at("name");
    for (const Json& r : a.at("reasons"))
      if (r.at("code") == "unsupported_isa" &&
          r.at("required").get<std::string>().rfind("avx512", 0) == 0)
        some_needed_avx512 = true;
  }
  EXPECT_TRUE(some_needed_avx512);
  EXPECT_EQ(replayed.at("selected"), capped.at("selected"));
  EXPECT_EQ(replayed.at("deployment").at("hardware").at("source"), file.string());
}

TEST(CliExplain, NothingFitsExitsThreeWithTheFullMessage) {
  // Rank 7 of a group of 2 does not exist: every backend refuses (expert_parallel).
  const Result table = run("", "explain --ep-size 2 --ep-rank 7");
  EXPECT_EQ(table.rc, 3);
  EXPECT_THAT(table.err, HasSubstr("No MXFP4 MoE backend supports the deployment configuration. "
                                   "weight_key=mxfp4, activation_key=bf16, batch_invariant=false"));
  EXPECT_THAT(table.err, HasSubstr("reason: expert_parallel"));
  EXPECT_THAT(table.out, HasSubstr("ep_size=1 would allow"));

  const Json j = explain_json("", "--ep-size 2 --ep-rank 7", 3);
  EXPECT_TRUE(j.at("selected").is_null());
  EXPECT_THAT(j.at("error").get<std::string>(), HasSubstr("Candidate backends were: ["));
  ASSERT_FALSE(j.at("suggestions").empty());
  EXPECT_EQ(j.at("suggestions").back().at("change"), "ep_size=1");
}

TEST(CliExplain, UnknownBackendIsBadUsageListingValidNames) {
  const Result r = run("", "explain --backend cuda_marlin");
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown backend 'cuda_marlin'"));
  EXPECT_THAT(r.err, HasSubstr("reference"));
}

TEST(CliExplain, FlagsWinOverEnvironment) {
  const std::string env =
      "MXMOE_ACTIVATION=int8 MXMOE_THREADS=5 MXMOE_BATCH_INVARIANT=1 MXMOE_EXCLUDE=reference";
  const Json from_env = explain_json(env, "").at("deployment").at("request");
  EXPECT_EQ(from_env.at("activation"), "int8");
  EXPECT_EQ(from_env.at("threads"), 5);
  EXPECT_EQ(from_env.at("batch_invariant"), true);
  EXPECT_EQ(from_env.at("excluded_backends"), Json::array({"reference"}));

  const Json flags =
      explain_json(env, "--activation f32 --threads 3 --exclude avx2 --backend reference")
          .at("deployment")
          .at("request");
  EXPECT_EQ(flags.at("activation"), "f32");
  EXPECT_EQ(flags.at("threads"), 3);
  EXPECT_EQ(flags.at("excluded_backends"), Json::array({"avx2"}));
  EXPECT_EQ(flags.at("forced_backend"), "reference");
  EXPECT_EQ(flags.at("batch_invariant"), true);  // no flag given: the variable stands
}

TEST(CliExplain, VerboseDispatchLogsOneLinePerCandidate) {
  const Result r = run("MXMOE_VERBOSE=dispatch", "explain");
  EXPECT_EQ(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("mxmoe dispatch: reference: supported"));
}

TEST(CliBackends, MarkdownIsTheDocument) {
  const Result r = run("", "backends --markdown");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, slurp(std::filesystem::path(MXMOE_SOURCE_DIR) / "docs/BACKENDS.md"))
      << "docs/BACKENDS.md is stale: run `build/mxmoe backends --markdown > docs/BACKENDS.md`";
}

TEST(CliInfo, HardwareTableSaysThereIsNoCuda) {
  const Result r = run("", "info --hardware");
  EXPECT_EQ(r.rc, 0);
  EXPECT_THAT(r.out, HasSubstr("CUDA:       none (no CUDA runtime in this build)"));
  EXPECT_THAT(r.out, HasSubstr("avx2"));
}

}  // namespace
