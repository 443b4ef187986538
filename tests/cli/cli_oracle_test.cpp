// The oracle's commands through the built `mxmoe` binary: exit codes, JSON shape, replay of
// a captured probe, flag-over-environment precedence. Few and fast: each runs the binary
// once or twice.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>

#include "cli_process.hpp"
#include "mxmoe/hardware.hpp"

namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

using mxmoe::cli_testing::Result;
using mxmoe::cli_testing::run;
using mxmoe::cli_testing::slurp;
namespace fs = std::filesystem;

std::filesystem::path temp_dir() {
  return mxmoe::cli_testing::scratch_dir();
}

Json explain_json(const std::string& env, const std::string& args, int expected_rc = 0) {
  const Result r = run(env, "explain --json " + args);
  EXPECT_EQ(r.rc, expected_rc) << r.err;
  return Json::parse(r.out);
}

TEST(CliExplain, JsonListsEveryCandidateWithItsReasons) {
  MXMOE_REQUIRE_X86_BACKENDS();
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
  MXMOE_REQUIRE_X86_BACKENDS();
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

// The shipped probes of the AVX2 classes (examples/hardware/): each is exactly what
// `info --hardware --json` writes, and `explain` on it says what runs there and why.
std::filesystem::path example_probe(const char* name) {
  return std::filesystem::path(MXMOE_SOURCE_DIR) / "examples/hardware" / name;
}

const Json& candidate(const Json& j, const std::string& name) {
  for (const Json& c : j.at("candidates"))
    if (c.at("name") == name) return c;
  ADD_FAILURE() << "no candidate " << name;
  return j;
}

bool refused_for(const Json& c, const std::string& code, const std::string& required) {
  for (const Json& r : c.at("reasons"))
    if (r.at("code") == code && r.at("required") == required) return true;
  return false;
}

TEST(CliExplain, ExampleProbesAreInTheFormInfoWrites) {
  for (const char* name : {"graviton3.json", "graviton4.json", "grace.json", "altra.json"}) {
    SCOPED_TRACE(name);
    const std::string text = slurp(example_probe(name));
    const mxmoe::Hardware h = mxmoe::hardware_from_json(text);
    EXPECT_EQ(mxmoe::to_json(h) + "\n", text);
    EXPECT_EQ(h.arch, mxmoe::kArchAarch64);
    EXPECT_TRUE(h.isa.asimd && h.isa.asimddp);  // every Neoverse core
    EXPECT_FALSE(h.isa.avx2);
    EXPECT_EQ(h.isa.sve, std::string(name) != "altra.json");
  }
  for (const char* name : {"zen3.json", "alderlake.json"}) {
    SCOPED_TRACE(name);
    const std::string text = slurp(example_probe(name));
    const mxmoe::Hardware h = mxmoe::hardware_from_json(text);
    EXPECT_EQ(mxmoe::to_json(h) + "\n", text);
    EXPECT_TRUE(h.isa.avx2 && h.isa.fma && h.isa.f16c);
    EXPECT_FALSE(h.isa.avx512f);
    EXPECT_EQ(h.isa.avx_vnni, std::string(name) == "alderlake.json");
  }
}

TEST(CliExplain, Zen3ProbeRunsTheAvx2Paths) {
  MXMOE_REQUIRE_X86_BACKENDS();
  const std::string hw = "--hardware " + example_probe("zen3.json").string();
  // int8: the ymm int8 backend; AVX-VNNI and AVX-512 are missing, each said by name.
  const Json int8 = explain_json("", hw + " --activation int8");
  EXPECT_EQ(int8.at("selected"), "avx2_int8");
  EXPECT_TRUE(refused_for(candidate(int8, "avx_vnni_int8"), "unsupported_isa", "avx_vnni"));
  EXPECT_TRUE(refused_for(candidate(int8, "avx512_vnni_int8"), "unsupported_isa", "avx512_vnni"));
  EXPECT_TRUE(refused_for(candidate(int8, "avx2_fp32"), "activation_format", "f32, bf16"));
  // The family default (bf16): int16 blocks by vpmaddwd ahead of the float strip backend,
  // which also fits; the int8 backend is refused for the format.
  const Result text = run("", "explain " + hw);
  EXPECT_EQ(text.rc, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("avx2 fma f16c"));
  for (const char* tokens : {"1", "8", "512"}) {
    SCOPED_TRACE(tokens);
    const Json bf16 = explain_json("", hw + " --tokens " + tokens);
    EXPECT_EQ(bf16.at("selected"), "avx2_int16");
    EXPECT_TRUE(candidate(bf16, "avx2_fp32").at("supported").get<bool>());
    EXPECT_TRUE(refused_for(candidate(bf16, "avx2_int8"), "activation_format", "int8"));
  }
  // f32: only the float strip backend.
  EXPECT_EQ(explain_json("", hw + " --activation f32").at("selected"), "avx2_fp32");
  EXPECT_TRUE(refused_for(candidate(explain_json("", hw + " --activation f32"), "avx2_int16"),
                          "activation_format", "bf16"));
}

TEST(CliExplain, AlderLakeProbeRunsTheAvxVnniPath) {
  MXMOE_REQUIRE_X86_BACKENDS();
  const std::string hw = "--hardware " + example_probe("alderlake.json").string();
  for (const char* tokens : {"1", "512"}) {
    SCOPED_TRACE(tokens);
    const Json j = explain_json("", hw + " --activation int8 --tokens " + tokens);
    EXPECT_EQ(j.at("selected"), "avx_vnni_int8");
    EXPECT_TRUE(candidate(j, "avx2_int8").at("supported").get<bool>());
    // bf16 (the family default): int16 blocks by vpmaddwd, as on the AVX2-only probe.
    EXPECT_EQ(explain_json("", hw + " --tokens " + tokens).at("selected"), "avx2_int16");
  }
  // Batch invariant: still the VNNI form (one numerics class with avx2_int8).
  EXPECT_EQ(explain_json("", hw + " --activation int8 --batch-invariant").at("selected"),
            "avx_vnni_int8");
}

// The shipped Arm server probes (Neoverse N1: Altra; V1: Graviton 3; V2: Graviton 4, Grace).
// An aarch64 build runs bf16 (the family default) on the int16 class, f32 on the float path
// (neon_fp32), and int8 with smmla where the core has I8MM (V1, V2) and with sdot where it
// has only the dot product (N1); the SVE backend fits where SVE is, ranked after smmla; every
// x86 backend's kernels are of another build. An x86-64 build says the same of the Arm
// backends, naming the build that has them.
TEST(CliExplain, ArmServerProbesRunTheNeonBackendsInAnAarch64Build) {
  for (const char* name : {"altra.json", "graviton3.json", "graviton4.json", "grace.json"}) {
    SCOPED_TRACE(name);
    const std::string hw = "--hardware " + example_probe(name).string();
#if defined(__aarch64__)
    for (const char* tokens : {"1", "512"}) {
      const Json bf16 = explain_json("", hw + " --tokens " + tokens);
      EXPECT_EQ(bf16.at("selected"), "neon_int16");
      EXPECT_TRUE(refused_for(candidate(bf16, "neon_dotprod_int8"), "activation_format", "int8"));
      EXPECT_TRUE(refused_for(candidate(bf16, "avx2_int16"), "unsupported_isa", "avx2"));
      EXPECT_TRUE(refused_for(candidate(bf16, "avx2_int16"), "not_compiled",
                              "a build with the avx2 kernels"));
      EXPECT_EQ(candidate(bf16, "neon_fp32").at("supported").get<bool>(), true);  // ranked after
      // f32 activations: the float path, the one Arm backend for them.
      EXPECT_EQ(explain_json("", hw + " --activation f32 --tokens " + tokens).at("selected"),
                "neon_fp32");
      const Json int8 =
          explain_json("", hw + " --activation int8 --batch-invariant --tokens " + tokens);
      const bool altra = std::string_view(name) == "altra.json";
      EXPECT_EQ(int8.at("selected"), altra ? "neon_dotprod_int8" : "neon_i8mm_int8");
      EXPECT_EQ(candidate(int8, "neon_dotprod_int8").at("supported").get<bool>(), true);
      EXPECT_EQ(candidate(int8, "sve_int8").at("supported").get<bool>(), !altra);
      if (altra) {
        EXPECT_TRUE(refused_for(candidate(int8, "neon_i8mm_int8"), "unsupported_isa", "i8mm"));
        EXPECT_TRUE(refused_for(candidate(int8, "sve_int8"), "unsupported_isa", "sve"));
      }
      EXPECT_TRUE(candidate(int8, "reference").at("supported").get<bool>() == false);
    }
#else
    const Json j = explain_json("", hw, 3);  // only the judge-only reference is left
    for (const char* arm :
         {"neon_int16", "neon_fp32", "neon_dotprod_int8", "neon_i8mm_int8", "sve_int8"}) {
      const Json& c = candidate(j, arm);
      bool names_the_build = false;
      for (const Json& r : c.at("reasons"))
        names_the_build |= r.at("code") == "not_compiled" &&
                           r.at("remedy").get<std::string>() == "use an aarch64 build of mxmoe";
      EXPECT_TRUE(names_the_build) << c.dump();
    }
#endif
  }
#if defined(__aarch64__)
  // This machine's probe capped below the dot product (MXMOE_MAX_ISA=neon, a cap a replayed
  // file does not take): int8 has no fast backend left, and the reason names the feature;
  // bf16 still runs, on baseline Advanced SIMD.
  const Json capped = explain_json("MXMOE_MAX_ISA=neon", "--activation int8", 3);
  EXPECT_FALSE(capped.at("deployment").at("hardware").at("isa").at("asimddp").get<bool>());
  EXPECT_TRUE(refused_for(candidate(capped, "neon_dotprod_int8"), "unsupported_isa", "asimddp"));
  // Below SVE (dotprod, i8mm) the SVE backend is refused for it; below I8MM, smmla's too.
  for (const char* cap : {"dotprod", "i8mm"}) {
    const Json j = explain_json(std::string("MXMOE_MAX_ISA=") + cap, "--activation int8");
    EXPECT_TRUE(refused_for(candidate(j, "sve_int8"), "unsupported_isa", "sve")) << cap;
    EXPECT_EQ(candidate(j, "neon_i8mm_int8").at("supported").get<bool>(),
              std::string_view(cap) == "i8mm" &&
                  j.at("deployment").at("hardware").at("isa").at("i8mm").get<bool>())
        << cap;
  }
  EXPECT_EQ(explain_json("MXMOE_MAX_ISA=neon", "").at("selected"), "neon_int16");
#endif
}

// The cap that reproduces the AVX-VNNI class: AVX-512 is gone, avx_vnni stays where the CPU
// has it (so on a CPU without it the verdicts are the avx2 cap's).
TEST(CliExplain, AvxVnniCapDropsAvx512) {
  MXMOE_REQUIRE_X86_BACKENDS();
  const Json capped = explain_json("MXMOE_MAX_ISA=avx_vnni", "--activation int8");
  EXPECT_EQ(capped.at("deployment").at("hardware").at("isa_cap"), "avx_vnni");
  const Json isa = capped.at("deployment").at("hardware").at("isa");
  EXPECT_FALSE(isa.at("avx512f").get<bool>());
  const Json probe = Json::parse(run("", "info --hardware --json").out);
  EXPECT_EQ(isa.at("avx_vnni"), probe.at("isa").at("avx_vnni"));
  EXPECT_EQ(capped.at("selected"),
            probe.at("isa").at("avx_vnni").get<bool>() ? "avx_vnni_int8" : "avx2_int8");
  const Result bad = run("MXMOE_MAX_ISA=avx9", "explain");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr("x86-64: avx2, avx_vnni, avx512, amx"));
  EXPECT_THAT(bad.err, HasSubstr("aarch64: neon, dotprod, i8mm, sve"));
}

TEST(CliExplain, NothingFitsExitsThreeWithTheFullMessage) {
  MXMOE_REQUIRE_X86_BACKENDS();
  // A placement table of 3 entries for a layer of 32 experts: every backend refuses
  // (expert_parallel). (A rank outside the group is a usage error, exit 2, before judging.)
  const fs::path table_file =
      fs::temp_directory_path() / ("mxmoe_placement_" + std::to_string(::getpid()) + ".json");
  std::ofstream(table_file) << R"({"ranks": 2, "owner": [0, 1, 1]})";
  const std::string args = "--placement " + table_file.string();
  const Result table = run("", "explain " + args);
  EXPECT_EQ(table.rc, 3);
  EXPECT_THAT(table.err, HasSubstr("No MXFP4 MoE backend supports the deployment configuration. "
                                   "weight_key=mxfp4, activation_key=bf16, batch_invariant=false"));
  EXPECT_THAT(table.err, HasSubstr("reason: expert_parallel"));
  EXPECT_THAT(table.out, HasSubstr("ep_size=1 would allow"));

  const Json j = explain_json("", args, 3);
  fs::remove(table_file);
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
  MXMOE_REQUIRE_X86_BACKENDS();
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
  // avx2_fp32 by its former name: the request reports the name it has now.
  EXPECT_EQ(flags.at("excluded_backends"), Json::array({"avx2_fp32"}));
  EXPECT_EQ(flags.at("forced_backend"), "reference");
  EXPECT_EQ(flags.at("batch_invariant"), true);  // no flag given: the variable stands
}

TEST(CliExplain, VerboseDispatchLogsOneLinePerCandidate) {
  MXMOE_REQUIRE_X86_BACKENDS();
  const Result r = run("MXMOE_VERBOSE=dispatch", "explain");
  EXPECT_EQ(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("mxmoe dispatch: reference: rejected [reference_only]"));
  EXPECT_THAT(r.err, HasSubstr(": selected ("));
}

TEST(CliBackends, MarkdownIsTheDocument) {
  MXMOE_REQUIRE_X86_BACKENDS();
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
