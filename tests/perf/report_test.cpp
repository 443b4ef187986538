#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "mxmoe/perf.hpp"

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
  m.peaks.push_back({"fp32_fma_avx2", "GFLOP/s", true, 100, 200, ""});
  m.peaks.push_back({"int8_amx", "GOP/s", false, 0, 0, "needs amx_tile"});
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
  r.rows.push_back(row);
  row.backend = "mystery";
  row.pct_peak = std::nan("");
  row.peak_class = "";
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
  const auto& results = j.at("results");
  ASSERT_EQ(results.size(), 2u);
  // The fields other tools read since the first version, then the spread, first call, layers
  // and bytes of issue 15.
  const std::vector<const char*> keys{
      "backend",      "activation",    "threads", "tokens", "us_median",    "us_sd",
      "tokens_per_s", "weight_gbps",   "gflops",  "pct_bw", "pct_peak",     "us_p10",
      "us_p90",       "first_call_us", "layers",  "reps",   "touched_bytes"};
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
            "reference,bf16,2,8,5,1000,10,8000,12,50,50,25,fp32_fma_avx2,1,990,1020,25000,12000");
  EXPECT_EQ(line2,
            "mystery,bf16,2,8,5,1000,10,8000,12,50,50,,,1,990,1020,25000,12000");  // NaN
                                                                                   // -> empty
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
  EXPECT_NE(md.find("1 thread: 4 passes in 2 measurements: 9.0-12.0, median 10.5; 2 threads: 4 "
                    "passes in 2 measurements: 18.0-24.0, median 21.0"),
            std::string::npos)
      << md;
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
  EXPECT_EQ(peak_class_for_backend("reference"), "fp32_fma_avx2");
  EXPECT_EQ(peak_class_for_backend("avx2"), "fp32_fma_avx2");
  EXPECT_EQ(peak_class_for_backend("avx512_bf16"), "bf16_dp_avx512");
  EXPECT_EQ(peak_class_for_backend("avx512_vnni"), "int8_vnni_avx512");
  EXPECT_EQ(peak_class_for_backend("avx2_int8"), "int8_maddubs_avx2");
  EXPECT_EQ(peak_class_for_backend("avx2_int16"), "int16_madd_avx2");
  EXPECT_EQ(peak_class_for_backend("avx_vnni_int8"), "int8_vnni_avx");
  EXPECT_EQ(peak_class_for_backend("amx_int8"), "int8_amx");
  EXPECT_EQ(peak_class_for_backend("amx_bf16"), "bf16_amx");
  EXPECT_EQ(peak_class_for_backend("cuda"), "");
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
  EXPECT_EQ(none.peaks.size(), 9u);
  for (const Peak& p : none.peaks) {
    EXPECT_FALSE(p.measured) << p.name;
    EXPECT_NE(p.note.find("needs"), std::string::npos) << p.name;
  }

  const Hardware live = probe_hardware();  // on a non-x86 machine: no feature at all
  hw.isa.avx2 = live.isa.avx2 && live.isa.fma;
  hw.isa.fma = hw.isa.avx2;
  hw.isa.avx512f = live.isa.avx512f;
  if (!hw.isa.avx2) GTEST_SKIP() << "this CPU has no AVX2";
  const MachineLimits some = measure_limits(hw, options);
  for (const Peak& p : some.peaks) {
    const bool expected = p.name == "fp32_fma_avx2" || p.name == "int8_maddubs_avx2" ||
                          p.name == "int16_madd_avx2" ||
                          (p.name == "fp32_fma_avx512" && hw.isa.avx512f);
    EXPECT_EQ(p.measured, expected) << p.name;
    if (p.measured) {
      EXPECT_GT(p.per_core, 0) << p.name;
      EXPECT_GT(p.all_threads, 0) << p.name;
    }
  }
}

}  // namespace
}  // namespace mxmoe::perf
