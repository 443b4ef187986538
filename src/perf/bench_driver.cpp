// run_bench: times MoE layers over (backend, activation, threads, tokens) and relates each
// row to the machine's measured limits.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>

#include "mxmoe/deployment.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/oracle.hpp"
#include "mxmoe/perf.hpp"
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

// The inputs of every call: activations (random, O(1)), and one routing stream per copy.
struct Inputs {
  std::vector<float> x, y, routing_weights;
  std::vector<std::int32_t> ids;
  std::vector<BalancedRouting> routing;

  Inputs(const LayerSpec& spec, int max_tokens, std::size_t copies) {
    const auto m = static_cast<std::size_t>(max_tokens);
    const auto h = static_cast<std::size_t>(spec.hidden);
    const auto k = static_cast<std::size_t>(spec.top_k);
    x.resize(m * h);
    y.resize(m * h);
    ids.resize(m * k);
    routing_weights.resize(m * k);
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

struct Timing {
  std::vector<double> seconds;
  double touched_bytes = 0;  // mean over the timed calls
};

// One call on the next copy: routing drawn outside the timed region.
double timed_call(BuiltLayers& built, Inputs& in, const LayerSpec& spec, int tokens,
                  int* distinct_experts) {
  const std::size_t c = built.next_copy;
  built.next_copy = (built.next_copy + 1) % built.layers.size();
  in.routing[c].fill(tokens, in.ids.data(), in.routing_weights.data());
  if (distinct_experts != nullptr)
    *distinct_experts =
        count_distinct_experts(std::span(in.ids.data(), static_cast<std::size_t>(tokens) *
                                                            static_cast<std::size_t>(spec.top_k)),
                               spec.num_experts);
  const Clock::time_point t0 = Clock::now();
  built.layers[c].forward_routed(in.x.data(), in.ids.data(), in.routing_weights.data(), tokens,
                                 in.y.data());
  return seconds_since(t0);
}

int choose_reps(const BenchConfig& config, double call_seconds) {
  if (config.reps > 0) return config.reps;
  const double s = std::max(call_seconds, 1e-9);
  int reps = static_cast<int>(std::clamp(std::floor(config.row_seconds / s), 3.0, 100000.0));
  if (reps * s > config.row_max_seconds)
    reps = std::max(1, static_cast<int>(std::floor(config.row_max_seconds / s)));
  return reps;
}

}  // namespace

BenchReport run_bench(const BenchLayers& layers, const Hardware& hw, const MachineLimits& limits,
                      const BenchConfig& config) {
  if (layers.copies.empty()) throw std::invalid_argument("run_bench: no layer copies");
  if (config.tokens.empty() || config.backends.empty())
    throw std::invalid_argument("run_bench: empty token or backend list");
  const LayerSpec& spec = layers.spec;

  std::vector<std::optional<ActivationFormat>> activations;
  for (const std::string& key : config.activations)
    activations.emplace_back(parse_activation_format(key));
  if (activations.empty()) activations.emplace_back(std::nullopt);
  std::vector<int> threads = config.threads;
  if (threads.empty()) threads = {1, std::max(1, hw.logical_cpus)};
  threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
  std::vector<int> tokens = config.tokens;  // ascending: small rows predict large ones
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());

  BenchReport report;
  report.machine = limits;
  report.layer = spec.name;
  report.mode = layers.mode;

  Inputs in(spec, tokens.back(), layers.copies.size());
  // One runtime per thread count, made before the layers that use them (and so outliving
  // them); a layer moves between them without packing again.
  std::map<int, std::unique_ptr<Runtime>> runtimes;
  for (int t : threads) runtimes[t] = std::make_unique<Runtime>(t);
  BuiltLayers built;
  const Preferences prefs = preferences_for(spec.family);
  const std::size_t total_rows =
      config.backends.size() * activations.size() * threads.size() * tokens.size();
  std::size_t row_index = 0;
  // (backend, activation, threads) -> the last measured (tokens, seconds per call).
  std::map<std::string, std::pair<int, double>> last_measured;
  // (backend, activation, tokens) -> seconds per call at the thread count measured last.
  std::map<std::string, double> seconds_at_size;

  for (const std::string& backend : config.backends) {
    const std::string forced = backend == "auto" ? std::string() : backend;
    for (const std::optional<ActivationFormat>& activation : activations) {
      for (int t : threads) {
        for (int m : tokens) {
          ++row_index;
          Request request;
          request.activation = activation;
          request.threads = t;
          request.tokens_hint = m;
          request.forced_backend = forced;
          request.excluded_backends = config.excluded_backends;
          request.batch_invariant = config.batch_invariant;
          const Selection selection = judge(Deployment{spec, hw, request}, prefs);
          const std::string wanted =
              fmt::format("backend={} activation={}", backend,
                          activation ? std::string(to_string(*activation)) : "default");
          if (selection.chosen.empty()) {
            push_unique(report.notes,
                        fmt::format("{}: skipped: {}", wanted, first_reason(selection, forced)));
            continue;
          }
          const std::optional<ActivationFormat>& resolved = selection.deployment.request.activation;
          const std::string act_name =
              resolved ? std::string(to_string(*resolved)) : std::string("default");
          const std::string key = selection.chosen + "/" + act_name;
          const std::string group = fmt::format("{}/{}", key, t);

          if (const auto it = last_measured.find(group); it != last_measured.end()) {
            // Linear in tokens from the last smaller row overestimates when that row was
            // memory-bound; the same size at fewer threads bounds it better when known.
            double predicted = it->second.second * m / it->second.first;
            if (const auto same = seconds_at_size.find(fmt::format("{}/{}", key, m));
                same != seconds_at_size.end())
              predicted = std::min(predicted, same->second);
            if (predicted > config.max_call_seconds) {
              push_unique(
                  report.notes,
                  fmt::format("{} threads={} tokens={}: skipped: predicted {:.1f} s per "
                              "call (from {} tokens) exceeds the {:.1f} s per-call limit",
                              key, t, m, predicted, it->second.first, config.max_call_seconds));
              continue;
            }
          }

          if (built.key != key) {
            built.layers.clear();  // frees the previous backend's packed weights first
            built.key = key;
            built.next_copy = 0;
            for (const LayerWeights& copy : layers.copies)
              built.layers.emplace_back(copy, selection, *runtimes.at(t));
            if (const std::size_t packed = built.layers.front().packed_weight_bytes(); packed > 0)
              push_unique(report.notes,
                          fmt::format("{} packs weights: {:.2f} GB resident for {} cop{}", key,
                                      static_cast<double>(packed * built.layers.size()) / 1e9,
                                      built.layers.size(), built.layers.size() == 1 ? "y" : "ies"));
          }
          for (MoeLayer& layer : built.layers) layer.set_runtime(*runtimes.at(t));

          // Warm-up: one call per copy (workspaces grow, pages fault in) within the budget.
          double warm = 1e30;
          const Clock::time_point warm_start = Clock::now();
          for (std::size_t c = 0; c < built.layers.size(); ++c) {
            warm = std::min(warm, timed_call(built, in, spec, m, nullptr));
            if (seconds_since(warm_start) > config.row_seconds) break;
          }

          const int reps = choose_reps(config, warm);
          std::vector<double> samples;
          double touched = 0;
          for (int r = 0; r < reps; ++r) {
            int distinct = 0;
            samples.push_back(timed_call(built, in, spec, m, &distinct));
            touched += static_cast<double>(touched_weight_bytes(spec, distinct));
          }
          touched /= reps;
          const Summary s = summarize(samples);
          last_measured[group] = {m, s.median};
          seconds_at_size[fmt::format("{}/{}", key, m)] = s.median;

          BenchRow row;
          row.backend = selection.chosen;
          row.activation = act_name;
          row.threads = t;
          row.tokens = m;
          row.reps = reps;
          row.us_median = s.median * 1e6;
          row.us_sd = s.sd * 1e6;
          row.tokens_per_s = m / s.median;
          row.weight_gbps = touched / s.median / 1e9;
          row.gflops = layer_flops(spec, m) / s.median / 1e9;
          const double bw = limits.dram_gbps(t);
          row.pct_bw = bw > 0 ? 100 * row.weight_gbps / bw : std::nan("");
          row.peak_class = peak_class_for_backend(row.backend);
          const double peak = row.peak_class.empty() ? 0 : limits.peak(row.peak_class, t);
          row.pct_peak = peak > 0 ? 100 * row.gflops / peak : std::nan("");
          if (config.progress)
            config.progress(fmt::format("[{}/{}] {} {} threads={} tokens={}: {:.1f} us x {} reps",
                                        row_index, total_rows, row.backend, row.activation, t, m,
                                        row.us_median, reps));
          report.rows.push_back(std::move(row));
        }
      }
    }
  }
  return report;
}

}  // namespace mxmoe::perf
