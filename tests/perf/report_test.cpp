#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backends/registry.hpp"
#include "perf/perf.hpp"
#include "test_platform.hpp"

namespace mxmoe::perf {
namespace {

MachineLimits sample_limits() {
  MachineLimits m;
  m.cpu = "Test CPU";
  m.threads = 2;
  m.l3_bytes = 480ull << 20;
  m.dram_buffer_bytes = 2ull << 30;
  m.dram_gbps_one_thread = 12;
  m.dram_gbps_all_threads = 24;
  Peak fma;
  fma.name = "fp32_fma_avx2";
  fma.unit = "GFLOP/s";
  fma.measured = true;
  fma.per_core = 100;
  fma.all_threads = 200;
  fma.passes_per_core = {90, 100, 95, 98, 99};
  fma.passes_all_threads = {190, 200, 180, 196, 199};
  fma.ops_per_cycle = 32;
  fma.rate_source = "vfmadd231ps ymm: 2 per cycle";
  m.peaks.push_back(fma);
  Peak amx;
  amx.name = "int8_amx";
  amx.unit = "GOP/s";
  amx.note = "needs amx_tile";
  m.peaks.push_back(amx);
  m.measure_seconds = 1.5;
  return m;
}

BenchReport sample_report() {
  BenchReport r;
  r.machine = sample_limits();
  r.layer = "gpt-oss-20b";
  r.mode = "streaming: 5 copies";
  BenchRow row;
  row.backend = "reference";
  row.activation = "bf16";
  row.threads = 2;
  row.tokens = 8;
  row.reps = 5;
  row.us_median = 1000;
  row.us_sd = 10;
  row.us_p10 = 990;
  row.us_p90 = 1020;
  row.first_call_us = 25000;
  row.touched_bytes = 12e3;
  row.tokens_per_s = 8000;
  row.weight_gbps = 12;
  row.gflops = 50;
  row.pct_bw = 50;
  row.pct_peak = 25;
  row.peak_class = "fp32_fma_avx2";
  row.dram_gbps_near = 24;
  row.peak_near = 200;
  row.steal_pct = 0.5;
  r.rows.push_back(row);
  row.backend = "mystery";
  row.pct_peak = std::nan("");
  row.peak_class = "";
  row.peak_near = 0;
  r.rows.push_back(row);
  r.notes.push_back("backend=amx_int8 activation=default: skipped: amx_int8: unsupported_isa: x");
  return r;
}

TEST(Report, JsonHasExactlyTheDocumentedFields) {
  BenchReport report = sample_report();
  report.machine.dram_passes_one_thread = {11, 12};
  report.machine.dram_passes_all_threads = {20, 24};
  report.machine.dram_measurements = 1;
  const nlohmann::json j = nlohmann::json::parse(to_json(report));
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), 5u);
  EXPECT_EQ(j.at("layer"), "gpt-oss-20b");
  EXPECT_EQ(j.at("mode"), "streaming: 5 copies");
  EXPECT_EQ(j.at("notes").size(), 1u);
  EXPECT_EQ(j.at("machine").at("dram_gbps_all_threads").get<double>(), 24);
  EXPECT_EQ(j.at("machine").at("dram_passes_all_threads"), nlohmann::json::array({20, 24}));
  EXPECT_EQ(j.at("machine").at("dram_measurements"), 1);
  EXPECT_EQ(j.at("machine").at("peaks").size(), 2u);
  EXPECT_EQ(j.at("machine").at("peaks")[1].at("note"), "needs amx_tile");
  const auto& fma = j.at("machine").at("peaks")[0];
  EXPECT_EQ(fma.at("passes_per_core").size(), 5u);
  EXPECT_DOUBLE_EQ(fma.at("ops_per_cycle").get<double>(), 32);
  EXPECT_DOUBLE_EQ(fma.at("implied_ghz").get<double>(), 100.0 / 32);
  EXPECT_TRUE(j.at("machine").at("peaks")[1].at("implied_ghz").is_null());  // no rate: NaN
  const auto& results = j.at("results");
  ASSERT_EQ(results.size(), 2u);
  // The fields other tools read since the first version, then the spread, first call, layers
  // and bytes of issue 15.
  const std::vector<const char*> keys{
      "backend",  "activation",    "threads",        "tokens",        "us_median",
      "us_sd",    "tokens_per_s",  "weight_gbps",    "gflops",        "pct_bw",
      "pct_peak", "us_p10",        "us_p90",         "first_call_us", "layers",
      "reps",     "touched_bytes", "dram_gbps_near", "peak_near",     "steal_pct"};
  for (const auto& row : results) {
    EXPECT_EQ(row.size(), keys.size());
    for (const char* key : keys) EXPECT_TRUE(row.contains(key)) << key;
  }
  EXPECT_EQ(results[0].at("backend"), "reference");
  EXPECT_EQ(results[0].at("tokens"), 8);
  EXPECT_EQ(results[0].at("layers"), 1);
  EXPECT_DOUBLE_EQ(results[0].at("us_median").get<double>(), 1000);
  EXPECT_DOUBLE_EQ(results[0].at("us_p10").get<double>(), 990);
  EXPECT_DOUBLE_EQ(results[0].at("us_p90").get<double>(), 1020);
  EXPECT_DOUBLE_EQ(results[0].at("first_call_us").get<double>(), 25000);
  EXPECT_TRUE(results[1].at("pct_peak").is_null());  // unknown class: NaN -> null
}

TEST(Report, CsvHasAHeaderAndOneLinePerRow) {
  const std::string csv = to_csv(sample_report());
  std::istringstream in(csv);
  std::string header, line1, line2, extra;
  std::getline(in, header);
  std::getline(in, line1);
  std::getline(in, line2);
  EXPECT_FALSE(std::getline(in, extra));
  EXPECT_EQ(header.rfind("backend,activation,threads,tokens,", 0), 0u);
  EXPECT_EQ(line1,
            "reference,bf16,2,8,5,1000,10,8000,12,50,50,25,fp32_fma_avx2,1,990,1020,25000,12000,"
            "24,200,0.5");
  EXPECT_EQ(line2,  // NaN -> empty
            "mystery,bf16,2,8,5,1000,10,8000,12,50,50,,,1,990,1020,25000,12000,24,,0.5");
}

TEST(Report, MarkdownShowsLimitsTableAndNotes) {
  const std::string md = to_markdown(sample_report());
  EXPECT_NE(md.find("| DRAM read (2.15 GB buffer, 4.3x LLC) | 12.0 | 24.0 | GB/s |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| int8_amx | - | - | GOP/s | needs amx_tile |"), std::string::npos) << md;
  EXPECT_NE(md.find("| reference | bf16 | 2 | 8 | 1 | 1000.0 (990.0-1020.0) | 5 | 25000 | 8000 | "
                    "0.0 | 12.00 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("streaming: 5 copies"), std::string::npos);
  EXPECT_NE(md.find("- backend=amx_int8"), std::string::npos);
}

TEST(Report, MarkdownShowsTheSpreadOfTheDramPasses) {
  BenchReport report = sample_report();
  report.machine.dram_passes_one_thread = {11, 12, 9, 10};  // median (10 + 11) / 2
  report.machine.dram_passes_all_threads = {20, 24, 18, 22};
  report.machine.dram_measurements = 2;
  const std::string md = to_markdown(report);
  EXPECT_NE(md.find("1 thread: 4 passes in 2 measurements: 9.0-12.0, median 10.5, spread 29%; 2 "
                    "threads: 4 passes in 2 measurements: 18.0-24.0, median 21.0, spread 29%"),
            std::string::npos)
      << md;
}

// A peak's passes, their spread, how they scale to all threads and the clock they imply
// against the instruction's documented rate: 100 GFLOP/s at 32 FLOP/cycle is 3.12 GHz.
TEST(Report, MarkdownShowsThePeakPassesAndTheClockTheyImply) {
  const std::string md = to_markdown(sample_report());
  EXPECT_NE(md.find("| fp32_fma_avx2 | 100 | 200 | GFLOP/s | 1 thread: 5 passes: 90-100, median "
                    "98, spread 10%; 2 threads: 5 passes: 180-200, median 196, spread 10%; 2 "
                    "threads = 2.00x 1 thread; implies 3.12 GHz per core at vfmadd231ps ymm: 2 "
                    "per cycle (32 ops/cycle) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("Steal time (other guests) is not reported"), std::string::npos) << md;
}

TEST(Report, OutputFormatKeys) {
  EXPECT_EQ(parse_output_format("md"), OutputFormat::md);
  EXPECT_EQ(parse_output_format("json"), OutputFormat::json);
  EXPECT_EQ(parse_output_format("csv"), OutputFormat::csv);
  EXPECT_THROW(parse_output_format("xml"), std::invalid_argument);
}

TEST(Limits, ThreadCountInterpolation) {
  MachineLimits m = sample_limits();
  EXPECT_DOUBLE_EQ(m.dram_gbps(1), 12);
  EXPECT_DOUBLE_EQ(m.dram_gbps(2), 24);
  EXPECT_DOUBLE_EQ(m.dram_gbps(8), 24);
  EXPECT_DOUBLE_EQ(m.peak("fp32_fma_avx2", 1), 100);
  EXPECT_DOUBLE_EQ(m.peak("fp32_fma_avx2", 2), 200);
  EXPECT_DOUBLE_EQ(m.peak("int8_amx", 2), 0);  // not measured
  EXPECT_DOUBLE_EQ(m.peak("nonexistent", 1), 0);
  m.threads = 5;
  m.dram_gbps_all_threads = 20;  // 12 at 1, 20 at 5: +2 per thread
  EXPECT_DOUBLE_EQ(m.dram_gbps(3), 16);
}

TEST(Limits, BackendClasses) {
#if defined(__aarch64__)
  EXPECT_EQ(peak_class_for_backend("reference"), "fp32_fma_neon");
#else
  EXPECT_EQ(peak_class_for_backend("reference"), "fp32_fma_avx2");
#endif
  EXPECT_EQ(peak_class_for_backend("neon_int16"), "int16_smlal_neon");
  EXPECT_EQ(peak_class_for_backend("neon_dotprod_int8"), "int8_sdot_neon");
  EXPECT_EQ(peak_class_for_backend("neon_i8mm_int8"), "int8_smmla_neon");
  EXPECT_EQ(peak_class_for_backend("sve_int8"), "int8_sdot_sve");
  EXPECT_EQ(peak_class_for_backend("avx2_fp32"), "fp32_fma_avx2");
  EXPECT_EQ(peak_class_for_backend("avx512_bf16"), "bf16_dp_avx512");
  EXPECT_EQ(peak_class_for_backend("avx512_vnni_int8"), "int8_vnni_avx512");
  EXPECT_EQ(peak_class_for_backend("avx2_int8"), "int8_maddubs_avx2");
  EXPECT_EQ(peak_class_for_backend("avx2_int16"), "int16_madd_avx2");
  EXPECT_EQ(peak_class_for_backend("avx_vnni_int8"), "int8_vnni_avx");
  EXPECT_EQ(peak_class_for_backend("amx_int8"), "int8_amx");
  EXPECT_EQ(peak_class_for_backend("amx_bf16"), "bf16_amx");
  EXPECT_EQ(peak_class_for_backend("neon_fp32"), "fp32_fma_neon");
  EXPECT_EQ(peak_class_for_backend("cuda"), "");
}

// Each backend's description names its peak class: one that measure_limits has a loop for,
// so a bench row never compares against a class nobody measures.
TEST(Limits, EveryBackendNamesAMeasuredPeakClass) {
  const std::vector<std::string> measured = peak_class_names();
  ASSERT_FALSE(measured.empty());
  for (const Backend* b : registered_backends()) {
    SCOPED_TRACE(std::string(b->name()));
    EXPECT_NE(std::find(measured.begin(), measured.end(), std::string(b->peak_class())),
              measured.end())
        << "peak class '" << b->peak_class() << "' is not one measure_limits measures";
    EXPECT_EQ(peak_class_for_backend(std::string(b->name())), b->peak_class());
  }
}

// Runs the measurement on a small buffer (no figure is asserted beyond being positive):
// loops the Hardware marks unusable are skipped with a reason and never executed.
TEST(Limits, SkipsWhatTheHardwareLacksAndMeasuresTheRest) {
  Hardware hw;
  hw.logical_cpus = 2;
  hw.l3_bytes = 1 << 20;
  LimitsOptions options;
  options.dram_buffer_bytes = 8u << 20;
  const MachineLimits none = measure_limits(hw, options);  // no ISA at all: scalar read
  EXPECT_EQ(none.threads, 2);
  EXPECT_EQ(none.dram_buffer_bytes, 8u << 20);
  EXPECT_GT(none.dram_gbps_one_thread, 0);
  EXPECT_GT(none.dram_gbps_all_threads, 0);
  EXPECT_EQ(none.peaks.size(), 14u);  // 9 x86-64 classes, 5 aarch64 ones
  for (const Peak& p : none.peaks) {
    EXPECT_FALSE(p.measured) << p.name;
    EXPECT_NE(p.note.find("needs"), std::string::npos) << p.name;
  }

  // Some of this machine's own features: exactly their classes are measured.
  const Hardware live = probe_hardware();
  hw.arch = live.arch;
  std::vector<std::string> expected;
  if (live.arch == "aarch64") {
    hw.isa.asimd = live.isa.asimd;
    hw.isa.asimddp = live.isa.asimddp;
    hw.isa.sve = live.isa.sve;
    hw.sve_vector_bits = live.sve_vector_bits;
    if (!hw.isa.asimd) GTEST_SKIP() << "this CPU has no Advanced SIMD";
    expected = {"fp32_fma_neon", "int16_smlal_neon"};
    if (hw.isa.asimddp) expected.emplace_back("int8_sdot_neon");
    if (hw.isa.sve) expected.emplace_back("int8_sdot_sve");
  } else {
    hw.isa.avx2 = live.isa.avx2 && live.isa.fma;
    hw.isa.fma = hw.isa.avx2;
    hw.isa.avx512f = live.isa.avx512f;
    if (!hw.isa.avx2) GTEST_SKIP() << "this CPU has no AVX2";
    expected = {"fp32_fma_avx2", "int8_maddubs_avx2", "int16_madd_avx2"};
    if (hw.isa.avx512f) expected.emplace_back("fp32_fma_avx512");
  }
  const MachineLimits some = measure_limits(hw, options);
  for (const Peak& p : some.peaks) {
    EXPECT_EQ(p.measured, std::find(expected.begin(), expected.end(), p.name) != expected.end())
        << p.name;
    if (p.measured) {
      EXPECT_GT(p.per_core, 0) << p.name;
      EXPECT_GT(p.all_threads, 0) << p.name;
    }
  }
}

// Every usable class is measured in `peak_passes` passes (rounds over the classes), the
// figures are the best pass, the latest pass is kept for a bench row's neighbour reading,
// and remeasure_peak adds one pass. Where the table knows the instruction's issue rate, the
// clock it implies is that of a CPU (0.3-7 GHz: a unit or rate error would be off by a
// factor of 2 or more, a loaded machine reads low but not 10x low on the best of 16 runs).
TEST(Limits, PeaksComeFromPassesSpreadOverTheRun) {
  const Hardware live = probe_hardware();
  if (!live.isa.avx2 && !live.isa.asimd) GTEST_SKIP() << "this CPU has neither AVX2 nor NEON";
  const std::string fma_class = live.isa.avx2 ? "fp32_fma_avx2" : "fp32_fma_neon";
  LimitsOptions options;
  options.dram_buffer_bytes = 8u << 20;
  options.peak_passes = 5;
  MachineLimits m = measure_limits(live, options);
  EXPECT_EQ(m.peak_measurements, 5);
  for (const Peak& p : m.peaks) {
    if (!p.measured) continue;
    ASSERT_EQ(p.passes_per_core.size(), 5u) << p.name;
    ASSERT_EQ(p.passes_all_threads.size(), 5u) << p.name;
    double best = 0;
    for (double v : p.passes_per_core) best = std::max(best, v);
    EXPECT_DOUBLE_EQ(p.per_core, best) << p.name;
    EXPECT_DOUBLE_EQ(p.latest_per_core, p.passes_per_core.back()) << p.name;
    EXPECT_DOUBLE_EQ(p.latest(1, m.threads), p.latest_per_core) << p.name;
    // Under AddressSanitizer the peak loops are instrumented (their accumulator arrays may live
    // in checked memory): they measure the sanitizer, not the machine (CI's sanitizer stage read a
    // Zen 4's FMA at an implied 0.26 GHz), so only the normal build holds the clock to a CPU's.
    if (p.ops_per_cycle > 0 && !kUnderAddressSanitizer) {
      EXPECT_GT(p.implied_ghz(), 0.3) << p.name << " " << p.rate_source;
      EXPECT_LT(p.implied_ghz(), 7.0) << p.name << " " << p.rate_source;
    }
  }
  remeasure_peak(live, m, fma_class);
  const Peak* fma = m.find_peak(fma_class);
  ASSERT_NE(fma, nullptr);
  EXPECT_EQ(fma->passes_per_core.size(), 6u);
  remeasure_peak(live, m, "no_such_class");  // absent: nothing happens
  remeasure_dram(live, m, 3);
  EXPECT_EQ(m.dram_passes_one_thread.size(), 8u);
  EXPECT_EQ(m.dram_measurements, 2);
  EXPECT_GT(m.latest_dram_gbps(1), 0);
  EXPECT_LE(m.latest_dram_gbps(1), m.dram_gbps(1));
  EXPECT_THROW(remeasure_dram(live, m, 0), std::invalid_argument);
  options.peak_passes = 0;
  EXPECT_THROW(measure_limits(live, options), std::invalid_argument);
}

// /proc/stat's steal column: readable on Linux, and a share of CPU time in [0, 100].
TEST(Limits, StealTimeIsAShareOfCpuTime) {
  const StealTicks t = steal_ticks();
#if defined(__linux__)
  ASSERT_TRUE(t.known);
  EXPECT_GE(t.total, t.steal);
  volatile double sink = 0;
  for (int i = 0; i < 20000000; ++i) sink = sink + 1.0;  // let a tick or more pass
  const double pct = steal_pct_since(t);
  if (std::isfinite(pct)) {
    EXPECT_GE(pct, 0);
    EXPECT_LE(pct, 100);
  }
#else
  EXPECT_FALSE(t.known);
  EXPECT_TRUE(std::isnan(steal_pct_since(t)));
#endif
}

}  // namespace
}  // namespace mxmoe::perf
