// run_bench's bookkeeping on a tiny layer (no speed is asserted): statistics fields, the first
// call reported apart, the whole-stack mode's bytes, and the rule that a row never exceeds
// 100% of the DRAM reading it is compared with.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mxmoe/hardware.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"
#include "perf/perf.hpp"
#include "perf/workload.hpp"

namespace mxmoe::perf {
namespace {

struct TinyLayers {
  std::vector<LayerStorage> storages;
  BenchLayers layers;
  explicit TinyLayers(int copies, bool stack) {
    layers.spec = preset("tiny");
    for (int c = 0; c < copies; ++c)
      storages.push_back(LayerStorage::random(layers.spec, 50 + static_cast<std::uint64_t>(c)));
    for (const LayerStorage& s : storages) layers.copies.push_back(s.weights());
    layers.layers_per_step = stack ? copies : 1;
    layers.mode = "test";
  }
};

MachineLimits fake_limits(double gbps) {
  MachineLimits m;
  m.threads = 1;
  m.dram_buffer_bytes = 4u << 20;
  m.dram_gbps_one_thread = gbps;
  m.dram_gbps_all_threads = gbps;
  return m;
}

BenchConfig quick_config() {
  BenchConfig c;
  c.tokens = {1, 4};
  c.threads = {1};
  c.backends = {"reference"};
  c.row_seconds = 0.001;  // auto reps: the floor (kMinAutoReps, one call per copy)
  c.remeasure_dram = false;
  return c;
}

TEST(BenchDriver, RowsCarryTheSpreadAndTheFirstCall) {
  TinyLayers tiny(3, false);
  const Hardware hw = probe_hardware();
  const BenchReport r = run_bench(tiny.layers, hw, fake_limits(1e6), quick_config());
  ASSERT_EQ(r.rows.size(), 2u);
  for (const BenchRow& row : r.rows) {
    EXPECT_EQ(row.layers, 1);
    EXPECT_GE(row.reps, kMinAutoReps);
    EXPECT_GT(row.first_call_us, 0);
    EXPECT_LE(row.us_p10, row.us_median);
    EXPECT_LE(row.us_median, row.us_p90);
    EXPECT_GT(row.us_p10, 0);
    // One layer per call, each token on top_k distinct experts (BalancedRouting):
    // 1 token touches exactly top_k experts.
    if (row.tokens == 1) {
      EXPECT_DOUBLE_EQ(row.touched_bytes, static_cast<double>(touched_weight_bytes(
                                              tiny.layers.spec, tiny.layers.spec.top_k)));
    }
    EXPECT_NEAR(row.weight_gbps, row.touched_bytes / (row.us_median * 1e-6) / 1e9,
                1e-9 * row.weight_gbps);
    EXPECT_NEAR(row.tokens_per_s, row.tokens / (row.us_median * 1e-6), 1e-9 * row.tokens_per_s);
    EXPECT_NEAR(row.pct_bw, 100 * row.weight_gbps / 1e6, 1e-9);
  }
}

TEST(BenchDriver, FixedRepsAreKept) {
  TinyLayers tiny(2, false);
  BenchConfig c = quick_config();
  c.reps = 2;
  const BenchReport r = run_bench(tiny.layers, probe_hardware(), fake_limits(1e6), c);
  for (const BenchRow& row : r.rows) EXPECT_EQ(row.reps, 2);
}

TEST(BenchDriver, StackModeTimesOneStepThroughEveryLayer) {
  TinyLayers tiny(3, true);
  const BenchReport r = run_bench(tiny.layers, probe_hardware(), fake_limits(1e6), quick_config());
  ASSERT_EQ(r.rows.size(), 2u);
  const LayerSpec& spec = tiny.layers.spec;
  for (const BenchRow& row : r.rows) {
    EXPECT_EQ(row.layers, 3);
    EXPECT_GE(row.reps, kMinAutoReps);
    // 3 layers x (2 top_k + 0 shared) for one token; flops are 3 layers' worth.
    if (row.tokens == 1) {
      EXPECT_DOUBLE_EQ(row.touched_bytes,
                       3.0 * static_cast<double>(touched_weight_bytes(spec, spec.top_k)));
    }
    EXPECT_NEAR(row.gflops, 3 * layer_flops(spec, row.tokens) / (row.us_median * 1e-6) / 1e9,
                1e-9 * row.gflops);
  }
  BenchLayers bad = tiny.layers;
  bad.layers_per_step = 2;  // neither 1 nor all the copies
  EXPECT_THROW(run_bench(bad, probe_hardware(), fake_limits(1), quick_config()),
               std::invalid_argument);
}

// A reading far below what a streaming row moved (1e-9 GB/s: every row is "over"): without
// re-measuring, the reading is raised to the fastest row, so no row exceeds 100%, and the
// notes say so.
TEST(BenchDriver, NoStreamingRowExceedsTheReadingItIsComparedWith) {
  TinyLayers tiny(2, false);
  const BenchReport r = run_bench(tiny.layers, probe_hardware(), fake_limits(1e-9), quick_config());
  ASSERT_FALSE(r.rows.empty());
  double fastest = 0;
  for (const BenchRow& row : r.rows) {
    EXPECT_LE(row.pct_bw, 100 + 1e-6) << row.tokens;
    fastest = std::max(fastest, row.weight_gbps);
  }
  EXPECT_DOUBLE_EQ(r.machine.dram_gbps_one_thread, fastest);
  bool said = false;
  for (const std::string& n : r.notes) said = said || n.find("is raised to") != std::string::npos;
  EXPECT_TRUE(said);

  // Cache-resident on purpose: the reading stays, rows may exceed it, a note says why.
  tiny.layers.streaming = false;
  const BenchReport cached =
      run_bench(tiny.layers, probe_hardware(), fake_limits(1e-9), quick_config());
  EXPECT_DOUBLE_EQ(cached.machine.dram_gbps_one_thread, 1e-9);
  EXPECT_GT(cached.rows.front().pct_bw, 100);
}

// Re-measuring next to every row: 3 DRAM passes after each row (plus 5 for each re-check of a
// row above 100%) and one pass of the row's peak class; each row is compared with the better
// of the readings just before and just after it, and the machine's figure stays the best.
TEST(BenchDriver, RowsAreComparedWithTheReadingsTakenNextToThem) {
  TinyLayers tiny(2, false);
  BenchConfig c = quick_config();
  c.tokens = {1, 2};
  c.remeasure_dram = true;
  const Hardware hw = probe_hardware();
  LimitsOptions options;
  options.dram_buffer_bytes = 4u << 20;
  options.peak_passes = 1;
  const MachineLimits m = measure_limits(hw, options);
  const BenchReport r = run_bench(tiny.layers, hw, m, c);
  ASSERT_EQ(r.rows.size(), 2u);
  const std::size_t rechecks = static_cast<std::size_t>(r.machine.dram_measurements) - 1 - 2;
  EXPECT_EQ(r.machine.dram_passes_one_thread.size(), 5u + 3u * 2u + 5u * rechecks);
  double best = 0;
  for (double v : r.machine.dram_passes_one_thread) best = std::max(best, v);
  EXPECT_GE(r.machine.dram_gbps_one_thread, best);
  for (const BenchRow& row : r.rows) {
    EXPECT_GT(row.dram_gbps_near, 0);
    EXPECT_LE(row.dram_gbps_near, r.machine.dram_gbps_one_thread + 1e-9);
    EXPECT_NEAR(row.pct_bw, 100 * row.weight_gbps / row.dram_gbps_near, 1e-9);
    EXPECT_LE(row.pct_bw, 100 + 1e-6);
    const Peak* p = r.machine.find_peak(row.peak_class);
    if (p != nullptr && p->measured) {
      EXPECT_GT(row.peak_near, 0);
      EXPECT_NEAR(row.pct_peak, 100 * row.gflops / row.peak_near, 1e-9);
    }
  }
  const Peak* p = r.machine.find_peak(r.rows.front().peak_class);
  if (p != nullptr && p->measured) {
    EXPECT_EQ(p->passes_per_core.size(), 1u + 2u);
  }
}

}  // namespace
}  // namespace mxmoe::perf
