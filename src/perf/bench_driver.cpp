// run_bench: times MoE layers over (backend, activation, threads, tokens) and relates each
// row to the machine's measured limits.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>

#include "mxmoe/deployment.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/oracle.hpp"
#include "perf/perf.hpp"
#include "perf/stats.hpp"
#include "perf/workload.hpp"

namespace mxmoe::perf {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The oracle's first reason against a deployment: the forced backend's, else the first
// rejected candidate's.
std::string first_reason(const Selection& s, const std::string& forced) {
  for (const Verdict& v : s.candidates) {
    if (!forced.empty() && v.name != forced) continue;
    if (!v.reasons.empty())
      return fmt::format("{}: {}: {}", v.name, to_string(v.reasons.front().code),
                         v.reasons.front().detail);
  }
  return "no backend fits";
}

void push_unique(std::vector<std::string>& notes, std::string note) {
  if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(std::move(note));
}

// The inputs of every call: activations (random, O(1)), and one routing stream (with its
// own ids and weights) per copy.
struct Inputs {
  std::vector<float> x, y;
  std::vector<std::vector<std::int32_t>> ids;
  std::vector<std::vector<float>> routing_weights;
  std::vector<BalancedRouting> routing;

  Inputs(const LayerSpec& spec, int max_tokens, std::size_t copies) {
    const auto m = static_cast<std::size_t>(max_tokens);
    const auto h = static_cast<std::size_t>(spec.hidden);
    const auto k = static_cast<std::size_t>(spec.top_k);
    x.resize(m * h);
    y.resize(m * h);
    ids.assign(copies, std::vector<std::int32_t>(m * k));
    routing_weights.assign(copies, std::vector<float>(m * k));
    std::mt19937_64 rng(0x6d786d6f65);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
    for (std::size_t c = 0; c < copies; ++c)
      routing.emplace_back(spec.num_experts, spec.top_k, 0x9e3779b97f4a7c15ull * (c + 1));
  }
};

// The layers built for one (backend, activation) selection, one per weight copy.
struct BuiltLayers {
  std::string key;
  std::vector<MoeLayer> layers;
  std::size_t next_copy = 0;  // calls cycle through the copies
};

struct Call {
  double seconds = 0;
  double touched_bytes = 0;
};

// One call: `layers_per_step` layers from the next copy on, each with its routing drawn
// outside the timed region. Every layer reads the same input (a step's real dependence
// through attention is not what is timed here) and writes the same output.
Call timed_call(BuiltLayers& built, Inputs& in, const LayerSpec& spec, int tokens,
                int layers_per_step) {
  Call call;
  const std::size_t first = built.next_copy;
  const auto slots = static_cast<std::size_t>(tokens) * static_cast<std::size_t>(spec.top_k);
  for (int j = 0; j < layers_per_step; ++j) {
    const std::size_t c = (first + static_cast<std::size_t>(j)) % built.layers.size();
    in.routing[c].fill(tokens, in.ids[c].data(), in.routing_weights[c].data());
    call.touched_bytes += static_cast<double>(touched_weight_bytes(
        spec, count_distinct_experts(std::span(in.ids[c].data(), slots), spec.num_experts)));
  }
  built.next_copy = (first + static_cast<std::size_t>(layers_per_step)) % built.layers.size();
  const Clock::time_point t0 = Clock::now();
  for (int j = 0; j < layers_per_step; ++j) {
    const std::size_t c = (first + static_cast<std::size_t>(j)) % built.layers.size();
    built.layers[c].forward({.tokens = tokens,
                             .x = in.x.data(),
                             .y = in.y.data(),
                             .expert_ids = in.ids[c].data(),
                             .expert_weights = in.routing_weights[c].data()});
  }
  call.seconds = seconds_since(t0);
  return call;
}

// Every byte the bench holds once every copy of BUILT has run TOKENS tokens: the inputs and
// routing streams, the weight copies, each copy's packed weights and its workspace (the layers
// do not share one: each grows its own at its first call of a size).
// What a row holds at its peak: the inputs, the weights, the packed copies and workspaces of
// the built layers, and (when the limits are measured next to each row, with the layers
// still built) the DRAM bandwidth buffer.
std::vector<std::pair<std::string, double>> memory_parts(const BenchLayers& layers, int max_tokens,
                                                         const BuiltLayers* built, int tokens,
                                                         double dram_buffer) {
  const auto copies = static_cast<double>(layers.copies.size());
  // Inputs' sizes, known before they are allocated (the bench allocates them after the first
  // check of a row: issue 38, a request that could never fit allocated gigabytes first).
  const double row = static_cast<double>(max_tokens) * layers.spec.hidden * sizeof(float);
  const double slots = static_cast<double>(max_tokens) * layers.spec.top_k;
  std::vector<std::pair<std::string, double>> parts = {
      {"input", row},
      {"output", row},
      {"routing", copies * slots * static_cast<double>(sizeof(std::int32_t) + sizeof(float))},
      {"layer weights", copies * static_cast<double>(layer_weight_bytes(layers.spec))}};
  if (built != nullptr && !built->layers.empty()) {
    const MoeLayer& first = built->layers.front();
    parts.emplace_back("packed weights", copies * static_cast<double>(first.packed_weight_bytes()));
    parts.emplace_back("workspaces", copies * static_cast<double>(first.workspace_bytes(tokens)));
  }
  if (dram_buffer > 0) parts.emplace_back("DRAM bandwidth buffer", dram_buffer);
  return parts;
}

void check_memory(const BenchConfig& config, const BenchLayers& layers, int max_tokens,
                  const BuiltLayers& built, int tokens, double dram_buffer,
                  const std::string& what) {
  if (config.check_memory)
    config.check_memory(what, memory_parts(layers, max_tokens, &built, tokens, dram_buffer));
}

int choose_reps(const BenchConfig& config, double call_seconds, int calls_per_cycle) {
  if (config.reps > 0) return config.reps;
  const double s = std::max(call_seconds, 1e-9);
  const double least = std::max(kMinAutoReps, calls_per_cycle);
  int reps = static_cast<int>(std::clamp(std::floor(config.row_seconds / s), least, 100000.0));
  if (reps * s > config.row_max_seconds)
    reps = std::max(1, static_cast<int>(std::floor(config.row_max_seconds / s)));
  return reps;
}

// pct_bw of every row against its reading.
void relate_to_bandwidth(BenchReport& report) {
  for (BenchRow& row : report.rows) {
    const double bw = row.dram_gbps_near;
    row.pct_bw = bw > 0 ? 100 * row.weight_gbps / bw : std::nan("");
  }
}

BenchRow* fastest_over_bandwidth(BenchReport& report) {
  BenchRow* worst = nullptr;
  for (BenchRow& row : report.rows)
    if (row.pct_bw > 100 + 1e-6 && (worst == nullptr || row.pct_bw > worst->pct_bw)) worst = &row;
  return worst;
}

std::string row_name(const BenchRow& r) {
  return fmt::format("{} {} threads={} tokens={}{}", r.backend, r.activation, r.threads, r.tokens,
                     r.layers > 1 ? fmt::format(" layers={}", r.layers) : std::string());
}

// A streaming row can never move weights faster than DRAM delivers them: a row above 100% of
// its reading means the reading was low (the machine was busy while it was taken). Measure
// again, at most twice in a run, and compare the rows above with the new reading too; if a
// row is still above, raise its reading (and the machine's, which must bound every row) to
// what that row moved, and say so in the notes.
void check_bandwidth(BenchReport& report, const Hardware& hw, bool streaming, bool remeasure) {
  relate_to_bandwidth(report);
  if (!streaming) {
    if (fastest_over_bandwidth(report) != nullptr)
      report.notes.emplace_back(
          "cache-resident run: weights may come from cache, so % DRAM bw may exceed 100");
    return;
  }
  MachineLimits& m = report.machine;
  for (int attempt = 0; attempt < 2 && remeasure; ++attempt) {
    const BenchRow* over = fastest_over_bandwidth(report);
    if (over == nullptr) return;
    report.notes.push_back(fmt::format(
        "{} moved {:.2f} GB/s, {:.0f}% of its DRAM reading {:.2f} GB/s: the reading is low "
        "(a busy machine); measured it again",
        row_name(*over), over->weight_gbps, over->pct_bw, over->dram_gbps_near));
    remeasure_dram(hw, m);
    for (BenchRow& row : report.rows)
      if (row.pct_bw > 100)
        row.dram_gbps_near = std::max(row.dram_gbps_near, m.latest_dram_gbps(row.threads));
    relate_to_bandwidth(report);
  }
  // Each raise brings one more row to <= 100%: at most one per row.
  for (std::size_t raises = 0; raises < report.rows.size(); ++raises) {
    BenchRow* over = fastest_over_bandwidth(report);
    if (over == nullptr) return;
    const double before = over->dram_gbps_near;
    over->dram_gbps_near = over->weight_gbps;
    if (over->threads <= 1 || m.threads <= 1) {
      m.dram_gbps_one_thread = std::max(m.dram_gbps_one_thread, over->weight_gbps);
    } else if (over->threads >= m.threads) {
      m.dram_gbps_all_threads = std::max(m.dram_gbps_all_threads, over->weight_gbps);
    } else if (m.dram_gbps(over->threads) < over->weight_gbps) {
      // the interpolation at over->threads meets the row
      const double f = static_cast<double>(over->threads - 1) / static_cast<double>(m.threads - 1);
      m.dram_gbps_all_threads =
          m.dram_gbps_one_thread + (over->weight_gbps - m.dram_gbps_one_thread) / f;
    }
    m.dram_gbps_all_threads = std::max(m.dram_gbps_all_threads, m.dram_gbps_one_thread);
    report.notes.push_back(fmt::format(
        "{} still moved {:.2f} GB/s, above its DRAM reading {:.2f} GB/s after measuring again: "
        "its reading is raised to what this row moved (treat its % DRAM bw as an upper "
        "bound)",
        row_name(*over), over->weight_gbps, before));
    relate_to_bandwidth(report);
  }
}

// The rows' axes: the activation formats (nullopt: the backend's default), the thread counts
// (repeats in a row dropped) and the token counts, ascending without repeats (small rows
// predict large ones).
struct Axes {
  std::vector<std::optional<ActivationFormat>> activations;
  std::vector<int> threads;
  std::vector<int> tokens;
};

Axes axes_of(const BenchConfig& config, const Hardware& hw) {
  Axes a;
  for (const std::string& key : config.activations)
    a.activations.emplace_back(parse_activation_format(key));
  if (a.activations.empty()) a.activations.emplace_back(std::nullopt);
  a.threads = config.threads;
  if (a.threads.empty()) a.threads = {1, std::max(1, hw.logical_cpus)};
  a.threads.erase(std::unique(a.threads.begin(), a.threads.end()), a.threads.end());
  a.tokens = config.tokens;
  std::sort(a.tokens.begin(), a.tokens.end());
  a.tokens.erase(std::unique(a.tokens.begin(), a.tokens.end()), a.tokens.end());
  return a;
}

// What the timed calls of one row gave, with the machine's readings next to them.
struct RowTiming {
  Call first_call;
  int reps = 0;
  Summary summary;
  double touched = 0;  // weight bytes per call
  double steal_pct = 0;
  std::string peak_class;  // the backend's instruction class ("" when it has none)
  double dram_near = 0, peak_near = 0;
};

// One run of the bench: every row of the axes in turn, with what the rows share (the
// runtimes, the layers built for the current (backend, activation), the inputs, the timings
// that predict the next rows).
class BenchRun {
 public:
  BenchRun(const BenchLayers& layers, const Hardware& hw, const MachineLimits& limits,
           const BenchConfig& config)
      : layers_(layers), hw_(hw), config_(config), spec_(layers.spec), axes_(axes_of(config, hw)) {
    report_.machine = limits;
    report_.layer = spec_.name;
    report_.mode = layers.mode;
    per_step_ = layers.layers_per_step;
    if (per_step_ != 1 && per_step_ != static_cast<int>(layers.copies.size()))
      throw std::invalid_argument("run_bench: layers_per_step must be 1 or the number of copies");
    // Layer mode cycles through the copies: one timed call per copy at least.
    calls_per_cycle_ = per_step_ == 1 ? static_cast<int>(layers.copies.size()) : 1;
    // The limits are measured again next to every row, with the row's layers still built.
    remeasure_buffer_ =
        config.remeasure_dram
            ? static_cast<double>(dram_buffer_bytes(hw, limits.dram_buffer_bytes, limits.threads))
            : 0.0;
    // One runtime per thread count, made before the layers that use them (and so outliving
    // them); a layer moves between them without packing again.
    for (int t : axes_.threads) runtimes_[t] = std::make_unique<Runtime>(t);
    prefs_ = preferences_for(spec_.family);
    total_rows_ = config.backends.size() * axes_.activations.size() * axes_.threads.size() *
                  axes_.tokens.size();
  }

  BenchReport run() && {
    for (const std::string& backend : config_.backends)
      for (const std::optional<ActivationFormat>& activation : axes_.activations)
        for (int t : axes_.threads)
          for (int m : axes_.tokens) run_row(backend, activation, t, m);
    check_bandwidth(report_, hw_, layers_.streaming, config_.remeasure_dram);
    return std::move(report_);
  }

 private:
  void run_row(const std::string& backend, const std::optional<ActivationFormat>& activation, int t,
               int m);
  Selection judge_row(const std::string& forced, const std::optional<ActivationFormat>& activation,
                      int t, int m) const;
  bool predicted_too_slow(const std::string& key, int t, int m);
  void build_layers(const std::string& key, const Selection& selection, int t);
  Inputs& ready_to_time(const std::string& key, int t, int m);
  RowTiming time_row(const std::string& backend, int t, int m);
  BenchRow row_of(const std::string& backend, const std::string& act_name, int t, int m,
                  const RowTiming& timing) const;

  const BenchLayers& layers_;
  const Hardware& hw_;
  const BenchConfig& config_;
  const LayerSpec& spec_;
  const Axes axes_;
  BenchReport report_;
  int per_step_ = 1, calls_per_cycle_ = 1;
  double remeasure_buffer_ = 0;
  std::map<int, std::unique_ptr<Runtime>> runtimes_;
  // Allocated at the first row, once every check before it has passed.
  std::optional<Inputs> inputs_;
  BuiltLayers built_;
  Preferences prefs_;
  std::size_t total_rows_ = 0, row_index_ = 0;
  // (backend, activation, threads) -> the last measured (tokens, seconds per call).
  std::map<std::string, std::pair<int, double>> last_measured_;
  // (backend, activation, tokens) -> seconds per call at the thread count measured last.
  std::map<std::string, double> seconds_at_size_;
};

void BenchRun::run_row(const std::string& backend,
                       const std::optional<ActivationFormat>& activation, int t, int m) {
  ++row_index_;
  const std::string forced = backend == "auto" ? std::string() : backend;
  const Selection selection = judge_row(forced, activation, t, m);
  const std::string wanted =
      fmt::format("backend={} activation={}", backend,
                  activation ? std::string(to_string(*activation)) : "default");
  if (selection.chosen.empty()) {
    push_unique(report_.notes,
                fmt::format("{}: skipped: {}", wanted, first_reason(selection, forced)));
    return;
  }
  const std::optional<ActivationFormat>& resolved = selection.deployment.request.activation;
  const std::string act_name =
      resolved ? std::string(to_string(*resolved)) : std::string("default");
  const std::string key = selection.chosen + "/" + act_name;
  if (predicted_too_slow(key, t, m)) return;
  if (built_.key != key) build_layers(key, selection, t);
  const RowTiming timing = time_row(selection.chosen, t, m);
  last_measured_[fmt::format("{}/{}", key, t)] = {m, timing.summary.median};
  seconds_at_size_[fmt::format("{}/{}", key, m)] = timing.summary.median;
  BenchRow row = row_of(selection.chosen, act_name, t, m, timing);
  if (config_.progress)
    config_.progress(fmt::format(
        "[{}/{}] {}: {:.1f} us (p10 {:.1f}, p90 {:.1f}) x {} reps, first call {:.1f} us",
        row_index_, total_rows_, row_name(row), row.us_median, row.us_p10, row.us_p90, row.reps,
        row.first_call_us));
  report_.rows.push_back(std::move(row));
}

// The one selection path, for the row's (backend, activation, threads, tokens).
Selection BenchRun::judge_row(const std::string& forced,
                              const std::optional<ActivationFormat>& activation, int t,
                              int m) const {
  Request request = config_.request;
  request.activation = activation;
  request.threads = t;
  request.tokens_hint = m;
  request.forced_backend = forced;
  return judge(Deployment{spec_, hw_, request}, prefs_);
}

// Whether the row's call would take longer than config.max_call_seconds, predicted from the
// rows measured before it (and then said in the notes).
bool BenchRun::predicted_too_slow(const std::string& key, int t, int m) {
  const auto it = last_measured_.find(fmt::format("{}/{}", key, t));
  if (it == last_measured_.end()) return false;
  // Linear in tokens from the last smaller row overestimates when that row was
  // memory-bound; the same size at fewer threads bounds it better when known.
  double predicted = it->second.second * m / it->second.first;
  if (const auto same = seconds_at_size_.find(fmt::format("{}/{}", key, m));
      same != seconds_at_size_.end())
    predicted = std::min(predicted, same->second);
  if (predicted <= config_.max_call_seconds) return false;
  push_unique(report_.notes,
              fmt::format("{} threads={} tokens={}: skipped: predicted {:.1f} s per "
                          "call (from {} tokens) exceeds the {:.1f} s per-call limit",
                          key, t, m, predicted, it->second.first, config_.max_call_seconds));
  return true;
}

// The layers of a new (backend, activation): one per weight copy, the previous ones freed
// first; how long they took and what they hold goes to the notes.
void BenchRun::build_layers(const std::string& key, const Selection& selection, int t) {
  built_.layers.clear();  // frees the previous backend's packed weights first
  built_.key = key;
  built_.next_copy = 0;
  const Clock::time_point build_start = Clock::now();
  for (const LayerWeights& copy : layers_.copies) {
    built_.layers.emplace_back(copy, selection, *runtimes_.at(t));
    if (built_.layers.size() == 1)  // its packed bytes say what the others will take
      check_memory(config_, layers_, axes_.tokens.back(), built_, 0, remeasure_buffer_,
                   key + ": packing");
  }
  const double build_seconds = seconds_since(build_start);
  const std::size_t packed = built_.layers.front().packed_weight_bytes();
  push_unique(
      report_.notes,
      fmt::format("{}: {} layer{} built in {:.2f} s{}", key, built_.layers.size(),
                  built_.layers.size() == 1 ? "" : "s", build_seconds,
                  packed == 0 ? std::string(" (reads the weights in place)")
                              : fmt::format(", packed weights {:.2f} GB resident",
                                            static_cast<double>(packed) *
                                                static_cast<double>(built_.layers.size()) / 1e9)));
}

// The built layers on the row's runtime, the row's memory checked, the inputs allocated.
Inputs& BenchRun::ready_to_time(const std::string& key, int t, int m) {
  for (MoeLayer& layer : built_.layers) layer.set_runtime(*runtimes_.at(t));
  check_memory(config_, layers_, axes_.tokens.back(), built_, m, remeasure_buffer_,
               fmt::format("{}: {} tokens", key, m));
  if (!inputs_) inputs_.emplace(spec_, axes_.tokens.back(), layers_.copies.size());
  return *inputs_;
}

RowTiming BenchRun::time_row(const std::string& backend, int t, int m) {
  Inputs& in = ready_to_time(built_.key, t, m);
  RowTiming r;
  // Warm-up, untimed in the row's statistics: one call on every copy (workspaces grow
  // to this size, packed pages fault in). The first call is reported on its own.
  r.first_call = timed_call(built_, in, spec_, m, per_step_);
  double warm = r.first_call.seconds;
  for (int c = 1; c < calls_per_cycle_; ++c)
    warm = std::min(warm, timed_call(built_, in, spec_, m, per_step_).seconds);

  r.reps = choose_reps(config_, warm, calls_per_cycle_);
  std::vector<double> samples;
  r.peak_class = peak_class_for_backend(backend);
  const std::string& peak_class = r.peak_class;
  const auto peak_reading = [&] {
    const Peak* p = report_.machine.find_peak(peak_class);
    return p == nullptr ? 0.0 : p->latest(t, report_.machine.threads);
  };
  const double dram_before = report_.machine.latest_dram_gbps(t);
  const double peak_before = peak_reading();
  const StealTicks steal = steal_ticks();
  for (int i = 0; i < r.reps; ++i) {
    const Call call = timed_call(built_, in, spec_, m, per_step_);
    samples.push_back(call.seconds);
    r.touched += call.touched_bytes;
  }
  r.touched /= r.reps;
  r.steal_pct = steal_pct_since(steal);
  r.dram_near = report_.machine.dram_gbps(t);
  r.peak_near = peak_class.empty() ? 0 : report_.machine.peak(peak_class, t);
  if (config_.remeasure_dram) {  // the readings next to the row: just before and after
    constexpr int kRowDramPasses = 3;
    remeasure_dram(hw_, report_.machine, kRowDramPasses);
    if (!peak_class.empty()) remeasure_peak(hw_, report_.machine, peak_class);
    r.dram_near = std::max(dram_before, report_.machine.latest_dram_gbps(t));
    r.peak_near = std::max(peak_before, peak_reading());
  }
  r.summary = summarize(samples);
  return r;
}

BenchRow BenchRun::row_of(const std::string& backend, const std::string& act_name, int t, int m,
                          const RowTiming& timing) const {
  const Summary& s = timing.summary;
  BenchRow row;
  row.backend = backend;
  row.activation = act_name;
  row.threads = t;
  row.tokens = m;
  row.reps = timing.reps;
  row.layers = per_step_;
  row.us_median = s.median * 1e6;
  row.us_sd = s.sd * 1e6;
  row.us_p10 = s.p10 * 1e6;
  row.us_p90 = s.p90 * 1e6;
  row.first_call_us = timing.first_call.seconds * 1e6;
  row.tokens_per_s = m / s.median;
  row.touched_bytes = timing.touched;
  row.weight_gbps = timing.touched / s.median / 1e9;
  row.gflops = per_step_ * layer_flops(spec_, m) / s.median / 1e9;
  row.peak_class = timing.peak_class;
  row.dram_gbps_near = timing.dram_near;
  row.peak_near = timing.peak_near;
  row.pct_peak = timing.peak_near > 0 ? 100 * row.gflops / timing.peak_near : std::nan("");
  row.steal_pct = timing.steal_pct;
  return row;
}

}  // namespace

BenchReport run_bench(const BenchLayers& layers, const Hardware& hw, const MachineLimits& limits,
                      const BenchConfig& config) {
  if (layers.copies.empty()) throw std::invalid_argument("run_bench: no layer copies");
  if (config.tokens.empty() || config.backends.empty())
    throw std::invalid_argument("run_bench: empty token or backend list");
  return BenchRun(layers, hw, limits, config).run();
}

}  // namespace mxmoe::perf
