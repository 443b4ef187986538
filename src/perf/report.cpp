// The bench report as JSON (for comparing builds), Markdown (for people) and CSV.
#include <fmt/core.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "perf/perf.hpp"
#include "perf/stats.hpp"

namespace mxmoe::perf {

namespace {

using Json = nlohmann::json;

Json machine_json(const MachineLimits& m) {
  Json peaks = Json::array();
  for (const Peak& p : m.peaks)
    peaks.push_back({{"name", p.name},
                     {"unit", p.unit},
                     {"measured", p.measured},
                     {"per_core", p.per_core},
                     {"all_threads", p.all_threads},
                     {"passes_per_core", p.passes_per_core},
                     {"passes_all_threads", p.passes_all_threads},
                     {"ops_per_cycle", p.ops_per_cycle},
                     {"implied_ghz", p.ops_per_cycle > 0 ? p.implied_ghz() : std::nan("")},
                     {"rate_source", p.rate_source},
                     {"note", p.note}});
  return {{"cpu", m.cpu},
          {"threads", m.threads},
          {"l3_bytes", m.l3_bytes},
          {"dram_buffer_bytes", m.dram_buffer_bytes},
          {"dram_gbps_one_thread", m.dram_gbps_one_thread},
          {"dram_gbps_all_threads", m.dram_gbps_all_threads},
          {"dram_passes_one_thread", m.dram_passes_one_thread},
          {"dram_passes_all_threads", m.dram_passes_all_threads},
          {"dram_measurements", m.dram_measurements},
          {"peaks", peaks},
          {"peak_measurements", m.peak_measurements},
          {"steal_pct", m.steal_pct()},
          {"measure_seconds", m.measure_seconds}};
}

// A figure for a table cell: "-" when unknown (NaN or not measured).
std::string cell(double v, int decimals = 1) {
  return std::isfinite(v) ? fmt::format("{:.{}f}", v, decimals) : std::string("-");
}

// "10 passes in 2 measurements: 18.2-24.0, median 22.1, spread 26%" ("" without passes);
// the spread is (max - min) / median.
std::string spread_text(const std::vector<double>& passes, int measurements, int decimals = 1) {
  if (passes.empty()) return {};
  const Summary s = summarize(passes);
  std::string text = fmt::format("{} passes", passes.size());
  if (measurements > 0)
    text += fmt::format(" in {} measurement{}", measurements, measurements == 1 ? "" : "s");
  return text + fmt::format(": {:.{}f}-{:.{}f}, median {:.{}f}, spread {:.0f}%", s.min, decimals,
                            s.max, decimals, s.median, decimals,
                            s.median > 0 ? 100 * (s.max - s.min) / s.median : 0.0);
}

// A measured peak's note: its passes, how it scales to all threads, the clock it implies.
std::string peak_note(const Peak& p, int threads) {
  std::string out = fmt::format("1 thread: {}", spread_text(p.passes_per_core, 0, 0));
  if (threads > 1) {
    out += fmt::format("; {} threads: {}", threads, spread_text(p.passes_all_threads, 0, 0));
    if (p.per_core > 0)
      out += fmt::format("; {} threads = {:.2f}x 1 thread", threads, p.all_threads / p.per_core);
  }
  if (p.ops_per_cycle > 0)
    out += fmt::format("; implies {:.2f} GHz per core at {} ({:.0f} ops/cycle)", p.implied_ghz(),
                       p.rate_source, p.ops_per_cycle);
  else
    out += "; no documented issue rate kept for this CPU";
  if (!p.note.empty()) out += "; " + p.note;
  return out;
}

// A reading that is 0 when unknown, as NaN (null in JSON, empty in CSV, "-" in Markdown).
double known(double reading) {
  return reading > 0 ? reading : std::nan("");
}

std::string csv_number(double v) {
  return std::isfinite(v) ? fmt::format("{:.6g}", v) : std::string();
}

}  // namespace

OutputFormat parse_output_format(const std::string& key) {
  if (key == "md") return OutputFormat::md;
  if (key == "json") return OutputFormat::json;
  if (key == "csv") return OutputFormat::csv;
  throw std::invalid_argument("unknown output format '" + key + "' (valid: md, json, csv)");
}

std::string to_json(const BenchReport& report) {
  Json results = Json::array();
  for (const BenchRow& r : report.rows)
    results.push_back({{"backend", r.backend},
                       {"activation", r.activation},
                       {"threads", r.threads},
                       {"tokens", r.tokens},
                       {"layers", r.layers},
                       {"reps", r.reps},
                       {"us_median", r.us_median},
                       {"us_sd", r.us_sd},
                       {"us_p10", r.us_p10},
                       {"us_p90", r.us_p90},
                       {"first_call_us", r.first_call_us},
                       {"tokens_per_s", r.tokens_per_s},
                       {"touched_bytes", r.touched_bytes},
                       {"weight_gbps", r.weight_gbps},
                       {"gflops", r.gflops},
                       {"pct_bw", r.pct_bw},
                       {"pct_peak", r.pct_peak},
                       {"dram_gbps_near", r.dram_gbps_near},
                       {"peak_near", known(r.peak_near)},
                       {"steal_pct", r.steal_pct}});
  const Json doc = {{"machine", machine_json(report.machine)},
                    {"layer", report.layer},
                    {"mode", report.mode},
                    {"results", results},
                    {"notes", report.notes}};
  return doc.dump(2) + "\n";  // nlohmann writes NaN as null
}

std::string format_limits_markdown(const MachineLimits& m) {
  std::string out = fmt::format(
      "Machine limits ({}; measured in {:.1f} s, best of several runs; shared machines are "
      "noisy):\n\n| limit | 1 thread | {} threads | unit | note |\n|---|---:|---:|---|---|\n",
      m.cpu.empty() ? "this CPU" : m.cpu, m.measure_seconds, m.threads);
  out += fmt::format(
      "| DRAM read ({:.2f} GB buffer, {:.1f}x LLC) | {} | {} | GB/s | {} |\n",
      static_cast<double>(m.dram_buffer_bytes) / 1e9,
      m.l3_bytes > 0 ? static_cast<double>(m.dram_buffer_bytes) / static_cast<double>(m.l3_bytes)
                     : 0.0,
      cell(m.dram_gbps_one_thread), cell(m.dram_gbps_all_threads),
      m.dram_passes_one_thread.empty()
          ? std::string()
          : fmt::format("best pass; 1 thread: {}; {} threads: {}",
                        spread_text(m.dram_passes_one_thread, m.dram_measurements), m.threads,
                        spread_text(m.dram_passes_all_threads, m.dram_measurements)));
  for (const Peak& p : m.peaks) {
    const double nan = std::nan("");
    out += fmt::format("| {} | {} | {} | {} | {} |\n", p.name,
                       cell(p.measured ? p.per_core : nan, 0),
                       cell(p.measured ? p.all_threads : nan, 0), p.unit,
                       p.measured ? peak_note(p, m.threads) : p.note);
  }
  const double steal = m.steal_pct();
  out += std::isfinite(steal)
             ? fmt::format("\nWhile measuring, the hypervisor gave {:.1f}% of this machine's CPU "
                           "time to other guests (steal, /proc/stat).\n",
                           steal)
             : std::string("\nSteal time (other guests) is not reported by this kernel.\n");
  return out;
}

std::string to_markdown(const BenchReport& report) {
  std::string out = format_limits_markdown(report.machine);
  if (!report.layer.empty() || !report.mode.empty())
    out += fmt::format("\nLayer: {}; {}\n", report.layer, report.mode);
  if (!report.rows.empty()) {
    out +=
        "\n| backend | activation | threads | tokens | layers | us/call median (p10-p90) | reps | "
        "first call us | tokens/s | MB/call | weight GB/s | GFLOP/s | % DRAM bw | % peak | peak "
        "class | DRAM GB/s near | peak near | steal % |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n";
    for (const BenchRow& r : report.rows)
      out += fmt::format(
          "| {} | {} | {} | {} | {} | {} ({}-{}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} "
          "| {} | {} |\n",
          r.backend, r.activation, r.threads, r.tokens, r.layers, cell(r.us_median), cell(r.us_p10),
          cell(r.us_p90), r.reps, cell(r.first_call_us, 0),
          cell(r.tokens_per_s, r.tokens_per_s < 100 ? 2 : 0), cell(r.touched_bytes / 1e6, 1),
          cell(r.weight_gbps, 2), cell(r.gflops, 1), cell(r.pct_bw), cell(r.pct_peak),
          r.peak_class.empty() ? "-" : r.peak_class, cell(r.dram_gbps_near, 2),
          cell(known(r.peak_near), 0), cell(r.steal_pct));
  }
  if (!report.notes.empty()) {
    out += "\nNotes:\n";
    for (const std::string& n : report.notes) out += "- " + n + "\n";
  }
  return out;
}

std::string to_csv(const BenchReport& report) {
  std::string out =
      "backend,activation,threads,tokens,reps,us_median,us_sd,tokens_per_s,weight_gbps,gflops,"
      "pct_bw,pct_peak,peak_class,layers,us_p10,us_p90,first_call_us,touched_bytes,"
      "dram_gbps_near,peak_near,steal_pct\n";
  for (const BenchRow& r : report.rows)
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.backend,
                       r.activation, r.threads, r.tokens, r.reps, csv_number(r.us_median),
                       csv_number(r.us_sd), csv_number(r.tokens_per_s), csv_number(r.weight_gbps),
                       csv_number(r.gflops), csv_number(r.pct_bw), csv_number(r.pct_peak),
                       r.peak_class, r.layers, csv_number(r.us_p10), csv_number(r.us_p90),
                       csv_number(r.first_call_us), csv_number(r.touched_bytes),
                       csv_number(r.dram_gbps_near), csv_number(known(r.peak_near)),
                       csv_number(r.steal_pct));
  return out;
}

}  // namespace mxmoe::perf
