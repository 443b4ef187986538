// `mxmoe bench --model DIR --whole` through the built binary, on a tiny generated whole model:
// the JSON document's fields exist and are consistent (reps, tests, bytes, bandwidth); the flags
// of the two benches are kept apart. Speed is never asserted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "cli_process.hpp"
#include "io/io_fixtures.hpp"

namespace mxmoe {
namespace {

using cli_testing::Result;
using cli_testing::run;
using ::testing::HasSubstr;
using Json = nlohmann::json;
using testing_io::TempDir;

// A whole gpt-oss of 2 layers, 4 experts, hidden 64, a vocabulary of 300.
std::string tiny_whole_model(const TempDir& dir) {
  const std::string model = dir.path() + "/oss";
  const Result g = run("", "synth --preset gpt-oss-20b --full --layers 2 --experts 4 --hidden 64 "
                           "--intermediate 64 --vocab 300 --heads 4 --kv-heads 2 --head-dim 16 "
                           "--out " + model);
  EXPECT_EQ(g.rc, 0) << g.err;
  return model;
}

void expect_spread(const Json& s, std::size_t reps) {
  ASSERT_TRUE(s.contains("median") && s.contains("min") && s.contains("max") &&
              s.contains("samples"));
  EXPECT_EQ(s["samples"].size(), reps);
  EXPECT_GT(s["min"].get<double>(), 0);
  EXPECT_LE(s["min"].get<double>(), s["median"].get<double>());
  EXPECT_LE(s["median"].get<double>(), s["max"].get<double>());
}

TEST(CliBenchWhole, JsonHasEveryTestWithItsSpreadBytesAndBandwidth) {
  MXMOE_REQUIRE_X86_BACKENDS();
  TempDir dir;
  const std::string model = tiny_whole_model(dir);
  const Result r = run("", "bench --model " + model +
                               " --whole --pp 24 --tg 5 --batch 1,3 --reps 2 --threads 1 "
                               "--dram-buffer-mb 16 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const Json j = Json::parse(r.out);
  for (const char* key :
       {"model", "family", "cpu", "threads", "activation", "batch_invariant", "prefill_chunk",
        "reps", "describe", "load_s", "warmup_s", "peak_rss_bytes", "checkpoint_bytes",
        "kv_cache_bytes", "bytes_per_token", "dram", "load_average", "results"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["family"], "gpt_oss");
  EXPECT_EQ(j["threads"], 1);
  EXPECT_EQ(j["reps"], 2);
  EXPECT_GE(j["load_s"].get<double>(), 0);
  EXPECT_GT(j["peak_rss_bytes"].get<double>(), 0);
  EXPECT_GT(j["checkpoint_bytes"].get<double>(), 0);
  EXPECT_GT(j["kv_cache_bytes"].get<double>(), 0);
  // A token reads the active experts, attention and the head: less than the checkpoint holds.
  EXPECT_GT(j["bytes_per_token"].get<double>(), 0);
  EXPECT_LT(j["bytes_per_token"].get<double>(), j["checkpoint_bytes"].get<double>());
  const Json& dram = j["dram"];
  EXPECT_GT(dram["gbps_best"].get<double>(), 0);
  EXPECT_GE(dram["gbps_best"].get<double>(), dram["gbps_before"].get<double>());
  EXPECT_GE(dram["gbps_best"].get<double>(), dram["gbps_after"].get<double>());
  EXPECT_EQ(dram["buffer_bytes"].get<double>(), 16.0 * (1 << 20));

  const Json& results = j["results"];
  ASSERT_EQ(results.size(), 3u);  // pp24, tg5, tg5 x3
  EXPECT_EQ(results[0]["test"], "pp24");
  EXPECT_EQ(results[0]["kind"], "prefill");
  EXPECT_EQ(results[0]["tokens"], 24);
  EXPECT_EQ(results[1]["test"], "tg5");
  EXPECT_EQ(results[1]["batch"], 1);
  EXPECT_EQ(results[2]["test"], "tg5 x3");
  EXPECT_EQ(results[2]["batch"], 3);
  for (const Json& row : results) {
    expect_spread(row["tok_s"], 2);
    expect_spread(row["seconds"], 2);
    // tok/s is the tokens of all sequences over the timed seconds, rep by rep.
    for (std::size_t i = 0; i < 2; ++i)
      EXPECT_NEAR(row["tok_s"]["samples"][i].get<double>() *
                      row["seconds"]["samples"][i].get<double>(),
                  row["tokens"].get<double>() * row["batch"].get<double>(), 1e-6 * 24 * 3);
  }
  // Batch 1's decode relates its bytes to the bandwidth; the others do not claim to.
  ASSERT_TRUE(results[1].contains("weight_gbps"));
  EXPECT_NEAR(results[1]["weight_gbps"].get<double>(),
              j["bytes_per_token"].get<double>() * results[1]["tok_s"]["median"].get<double>() / 1e9,
              1e-9);
  EXPECT_NEAR(results[1]["pct_dram"].get<double>(),
              100 * results[1]["weight_gbps"].get<double>() / dram["gbps_best"].get<double>(), 1e-9);
  EXPECT_FALSE(results[0].contains("pct_dram"));
  EXPECT_FALSE(results[2].contains("pct_dram"));

  // The markdown report names each test.
  const Result md = run("", "bench --model " + model +
                                " --whole --pp 8 --tg 2 --batch 2 --reps 1 --threads 1 "
                                "--dram-buffer-mb 16");
  ASSERT_EQ(md.rc, 0) << md.err;
  EXPECT_THAT(md.out, HasSubstr("| pp8 | 1 |"));
  EXPECT_THAT(md.out, HasSubstr("| tg2 x2 | 2 |"));
}

// --compact names its format: bare int8, =int4 the 4-bit codes (fewer bytes a token than
// int8's, fewer than as published), the JSON and describe() say which; an unknown one is a
// usage error naming the accepted ones.
TEST(CliBenchWhole, TheCompactFormatIsNamedAndCounted) {
  MXMOE_REQUIRE_X86_BACKENDS();
  TempDir dir;
  const std::string model = tiny_whole_model(dir);
  const std::string base = "bench --model " + model +
                           " --whole --pp 0 --tg 2 --batch 1 --reps 1 --threads 1 "
                           "--dram-buffer-mb 16 --json";
  double bytes[3] = {};
  const char* formats[] = {"", " --compact", " --compact=int4"};
  const char* names[] = {"off", "int8", "int4"};
  for (int i = 0; i < 3; ++i) {
    const Result r = run("", base + formats[i]);
    ASSERT_EQ(r.rc, 0) << formats[i] << r.err;
    const Json j = Json::parse(r.out);
    EXPECT_EQ(j["compact"], names[i]);
    bytes[i] = j["bytes_per_token"].get<double>();
    if (i > 0) {
      EXPECT_THAT(j["describe"].get<std::string>(),
                  HasSubstr(std::string("(compact_") + names[i] + ")"));
    }
  }
  EXPECT_LT(bytes[2], bytes[1]);
  EXPECT_LT(bytes[1], bytes[0]);
  const Result bad = run("", base + " --compact=int5");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr("int5 not in {int8,int4}"));
}

TEST(CliBenchWhole, TheFlagsOfTheTwoBenchesAreKeptApart) {
  TempDir dir;
  const std::string whole = "bench --model " + dir.path() + " --whole";
  const std::pair<std::string, std::string> refused[] = {
      {"bench --whole --preset tiny", "--preset is a flag of the layer bench"},
      {"bench --whole", "--whole needs --model"},
      {"bench --preset tiny --pp 16", "--pp needs --whole"},
      {whole + " --threads 1,2", "one count with --whole"},
      {whole + " --activation bf16,int8", "one format with --whole"},
      {whole + " --pp 0 --tg 0", "nothing to time"},
  };
  for (const auto& [args, message] : refused) {
    const Result r = run("", args);
    EXPECT_EQ(r.rc, 2) << args;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
  }
}

}  // namespace
}  // namespace mxmoe
