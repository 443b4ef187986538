// `mxmoe bench` through the built binary: the JSON fields of issue 15 (spread, first call,
// layers) and the whole-stack mode (--layers N on a preset, --model DIR --layers all|list).
// Only the bookkeeping is checked; speed is never asserted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli_process.hpp"
#include "io/io_fixtures.hpp"
#include "io/npy.hpp"
#include "mxmoe/layer_spec.hpp"
#include "perf/workload.hpp"

namespace mxmoe {
namespace {

using cli_testing::Result;
using cli_testing::run;
using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;
using testing_io::TempDir;

void expect_row_fields(const Json& row) {
  for (const char* key :
       {"tokens", "pct_bw", "gflops", "weight_gbps", "us_median", "backend", "activation",
        "threads", "us_p10", "us_p90", "first_call_us", "layers", "touched_bytes"})
    EXPECT_TRUE(row.contains(key)) << key;
  EXPECT_LE(row["us_p10"].get<double>(), row["us_median"].get<double>());
  EXPECT_LE(row["us_median"].get<double>(), row["us_p90"].get<double>());
  EXPECT_GT(row["first_call_us"].get<double>(), 0);
}

// `bench --model MODEL --layers LAYERS` (1 token, 1 thread) as JSON: one row, its fields and
// its layer count checked.
Json bench_stack(const std::string& model, const std::string& layers, int reps,
                 int expected_layers) {
  const Result r = run("", "bench --model " + model + " --layers " + layers + " --tokens 1 --reps " +
                               std::to_string(reps) + " --threads 1 --json");
  EXPECT_EQ(r.rc, 0) << r.err;
  if (r.rc != 0) return Json::object();
  Json j = Json::parse(r.out);
  EXPECT_EQ(j["results"].size(), 1u);
  if (j["results"].size() != 1) return j;
  expect_row_fields(j["results"][0]);
  EXPECT_EQ(j["results"][0]["layers"], expected_layers);
  return j;
}

TEST(CliBench, StackOfGeneratedLayers) {
  MXMOE_REQUIRE_X86_BACKENDS();
  const Result r = run("", "bench --preset tiny --layers 3 --tokens 1 --reps 2 --threads 1 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 1u);
  const Json& row = j["results"][0];
  expect_row_fields(row);
  EXPECT_EQ(row["layers"], 3);
  // One token on 3 layers: 3 x top_k experts' bytes (tiny has no shared expert).
  const LayerSpec tiny = preset("tiny");
  EXPECT_DOUBLE_EQ(row["touched_bytes"].get<double>(),
                   3.0 * static_cast<double>(perf::touched_weight_bytes(tiny, tiny.top_k)));
  EXPECT_THAT(j["mode"].get<std::string>(), HasSubstr("whole stack: 3 layers per call"));
}

TEST(CliBench, StackOfAModelsLayers) {
  MXMOE_REQUIRE_X86_BACKENDS();
  TempDir dir;
  const std::string model = dir.path() + "/m";
  ASSERT_EQ(run("", "synth --preset tiny --layers 3 --out " + model).rc, 0);
  bench_stack(model, "all", 2, 3);
  bench_stack(model, "0,2", 1, 2);
  const Result out_of_range = run("", "bench --model " + model + " --layers 0,3 --tokens 1");
  EXPECT_EQ(out_of_range.rc, 2);
  EXPECT_THAT(out_of_range.err, HasSubstr("--layers: '3' is not an integer in [0, 2]"));
}

// DeepSeek-V4's hash-routed first layers and its routed layers have one expert shape: the
// bench (which routes at random) times them as one stack, and says so.
TEST(CliBench, StackOfDeepSeekV4HashAndRoutedLayers) {
  MXMOE_REQUIRE_X86_BACKENDS();
  TempDir dir;
  const std::string model = dir.path() + "/v4";
  ASSERT_EQ(run("", "synth --preset deepseek-v4-flash --experts 16 --hidden 256 "
                    "--intermediate 128 --layers 3 --hash-layers 1 --vocab 1000 --out " +
                        model)
                .rc,
            0);
  const Json all = bench_stack(model, "all", 2, 3);
  EXPECT_THAT(all.value("mode", ""), HasSubstr("hash-routed layers timed as routed"));
  // Routed layers alone: nothing to say.
  EXPECT_THAT(bench_stack(model, "1,2", 1, 2).value("mode", "?"), Not(HasSubstr("hash-routed")));
}

// run --model DIR --layers: one step through the layers; the stacked output [L, M, H] holds,
// at each layer's place, the same bits as `run --layer N` on the same input and seed.
TEST(CliRunLayers, StackedOutputsEqualTheSingleLayerRuns) {
  MXMOE_REQUIRE_X86_BACKENDS();
  TempDir dir;
  const std::string model = dir.path() + "/m";
  ASSERT_EQ(run("", "synth --preset tiny --layers 3 --out " + model).rc, 0);
  const std::string stacked = dir.path() + "/stack.npy";
  const Result r = run("", "run --model " + model +
                               " --layers 2,0 --tokens 5 --reps 1 --json "
                               "--output " +
                               stacked);
  ASSERT_EQ(r.rc, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["layers"], Json::array({2, 0}));
  EXPECT_EQ(j["tokens"], 5);
  const NpyArray all = read_npy(stacked);
  ASSERT_EQ(all.shape, (std::vector<std::int64_t>{2, 5, 256}));
  for (const auto& [place, layer] : {std::pair{0, 2}, std::pair{1, 0}}) {
    const std::string one = dir.path() + "/one.npy";
    ASSERT_EQ(run("", "run --model " + model + " --layer " + std::to_string(layer) +
                          " --tokens 5 --reps 1 --output " + one)
                  .rc,
              0);
    const NpyArray single = read_npy(one);
    ASSERT_EQ(single.data.size(), 5u * 256u);
    const auto offset = static_cast<std::ptrdiff_t>(place) * 5 * 256;
    EXPECT_TRUE(std::equal(single.data.begin(), single.data.end(), all.data.begin() + offset,
                           [](float a, float b) { return std::memcmp(&a, &b, 4) == 0; }))
        << "layer " << layer;
  }
  // Usage: --layers needs --model; a bad index names the range; nothing is written.
  const std::string never = dir.path() + "/never.npy";
  const Result preset = run("", "run --preset tiny --layers all --output " + never);
  EXPECT_EQ(preset.rc, 2);
  EXPECT_THAT(preset.err, HasSubstr("--layers needs --model"));
  const Result bad = run("", "run --model " + model + " --layers 0,3 --output " + never);
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr("--layers: '3' is not an integer in [0, 2]"));
  EXPECT_FALSE(std::filesystem::exists(never));
}

// Bad --layers values are usage errors found before the machine is measured.
TEST(CliRunLayers, ARepeatedLayerIsAUsageError) {
  // One slice per listed layer: "0,0" must not silently become one slice.
  const Result r = run("", "run --model /nonexistent --layers 1,0,1");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("listed twice"));
}

TEST(CliBench, LayersFlagErrorsComeFirst) {
  for (const char* c : {"bench --preset tiny --layers all", "bench --preset tiny --layers 1,2",
                        "bench --preset tiny --layers 0",
                        "bench --preset tiny --layers 2 "
                        "--cache-resident"}) {
    SCOPED_TRACE(c);
    const Result r = run("", c);
    EXPECT_EQ(r.rc, 2);
    EXPECT_THAT(r.err, HasSubstr("--layers"));
    EXPECT_THAT(r.err, Not(HasSubstr("measuring")));
  }
}

}  // namespace
}  // namespace mxmoe
