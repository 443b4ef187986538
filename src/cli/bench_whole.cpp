#include "cli/bench_whole.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/printable.hpp"
#include "cli/common.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/llm.hpp"
#include "mxmoe/runtime.hpp"
#include "perf/memory.hpp"
#include "perf/perf.hpp"
#include "perf/stats.hpp"

namespace mxmoe::cli {

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void say(const std::string& line) {
  print(stderr, "{}\n", line);
}

// The 1-, 5- and 15-minute load averages (/proc/loadavg): how busy the machine was, which a
// timing on a shared machine must say. Negative where unknown.
std::array<double, 3> load_average() {
  std::array<double, 3> l{-1, -1, -1};
  std::ifstream in("/proc/loadavg");
  if (!(in >> l[0] >> l[1] >> l[2])) l = {-1, -1, -1};
  return l;
}

// Bytes of the checkpoint's safetensors files (what a user downloads and maps).
std::uint64_t checkpoint_bytes(const std::string& dir) {
  std::uint64_t sum = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && e.path().extension() == ".safetensors") sum += e.file_size(ec);
  return sum;
}

// One test: a prefill of `tokens` prompt tokens (batch 1) or a decode of `tokens` tokens per
// sequence at `batch` sequences.
struct Test {
  std::string name;  // "pp512", "tg64", "tg64 x8"
  bool prefill = false;
  int tokens = 0;
  int batch = 1;
  std::vector<double> tok_s;    // one per rep, over all sequences
  std::vector<double> seconds;  // the timed part of each rep
};

std::vector<std::int32_t> random_prompt(std::mt19937_64& rng, int length, int vocab) {
  std::uniform_int_distribution<std::int32_t> id(0, vocab - 1);
  std::vector<std::int32_t> p(static_cast<std::size_t>(length));
  for (auto& t : p) t = id(rng);
  return p;
}

bool interrupted() {
  return StopOnSignal::stop_requested();
}

// Prefill: a PP-token prompt and one new token (the last row's logits and its sampling, as
// llama-bench's pp computes the last row's logits): PP / the call's time.
void time_prefill(LanguageModel& model, Test& t, std::mt19937_64& rng) {
  SamplingParams p;
  p.max_tokens = 1;
  p.ignore_eos = true;
  const std::vector<std::vector<std::int32_t>> prompts{random_prompt(rng, t.tokens, model.vocab_size())};
  const Clock::time_point start = Clock::now();
  (void)model.generate(prompts, p, {}, interrupted);
  const double s = seconds(start, Clock::now());
  t.seconds.push_back(s);
  t.tok_s.push_back(static_cast<double>(t.tokens) / s);
}

// Decode: BATCH one-token prompts (their prefill is one step, untimed), then TG steps of one
// token per sequence, timed from the end of the first step to the end of the last:
// BATCH x TG / that time. Sampling (greedy) is inside, as in any generation.
void time_decode(LanguageModel& model, Test& t, std::mt19937_64& rng) {
  SamplingParams p;
  p.max_tokens = t.tokens + 1;
  p.ignore_eos = true;
  std::vector<std::vector<std::int32_t>> prompts;
  for (int b = 0; b < t.batch; ++b) prompts.push_back(random_prompt(rng, 1, model.vocab_size()));
  const auto first_step = static_cast<std::size_t>(t.batch);
  std::size_t seen = 0;
  Clock::time_point start{}, end{};
  (void)model.generate(
      prompts, p,
      [&](std::size_t, std::int32_t) {
        ++seen;
        end = Clock::now();
        if (seen == first_step) start = end;
        return true;
      },
      interrupted);
  const double s = seconds(start, end);
  if (seen != first_step * static_cast<std::size_t>(t.tokens + 1) || !(s > 0)) return;  // cancelled
  t.seconds.push_back(s);
  t.tok_s.push_back(static_cast<double>(t.batch) * t.tokens / s);
}

Json summary_json(const std::vector<double>& v) {
  const perf::Summary s = perf::summarize(v);
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"samples", v}};
}

std::string gb(double bytes) {
  return fmt::format("{:.2f} GB", bytes / 1e9);
}

}  // namespace

std::optional<std::string> bench_whole_model(const WholeBenchOptions& o) {
  const Hardware hw = HardwareOptions::live();
  const int threads = o.request.threads > 0 ? o.request.threads : default_thread_count();
  const std::array<double, 3> load_before = load_average();

  // The DRAM read bandwidth first (its buffer is freed before the model is mapped), again at the
  // end; the fraction below is of the best pass of both.
  say(fmt::format("measuring DRAM read bandwidth ({} threads)...", threads));
  perf::LimitsOptions lo;
  lo.dram_buffer_bytes = o.dram_buffer_bytes;
  lo.threads = threads;
  lo.peak_passes = 1;
  perf::MachineLimits limits = perf::measure_limits(hw, lo);
  const double dram_before = limits.dram_latest_all_threads;

  int max_batch = 1;
  for (int b : o.batches) max_batch = std::max(max_batch, b);
  LlmOptions options;
  options.request = o.request;
  options.request.threads = threads;
  options.max_batch = max_batch;
  options.max_context = std::max(o.pp + 1, o.tg + 2);
  if (o.prefill_chunk > 0) options.prefill_chunk = o.prefill_chunk;
  options.compact = o.compact;
  options.memory_limit = available_memory_bytes();
  options.progress = say;

  // The bandwidth buffer is freed: the peak from here on is the model's.
  const bool peak_reset = perf::reset_peak_resident();
  StopOnSignal stop;
  Runtime runtime(threads);
  const Clock::time_point load_start = Clock::now();
  LanguageModel model(o.model, hw, runtime, options);
  const double load_s = seconds(load_start, Clock::now());
  say(fmt::format("loaded in {:.2f} s", load_s));

  std::mt19937_64 rng(o.seed);
  // Warm-up (untimed, as llama-bench's): a short prefill and a few decode steps at every batch
  // size, so that the mapping's pages and the packed experts are touched once.
  const Clock::time_point warm_start = Clock::now();
  {
    SamplingParams p;
    p.max_tokens = 2;
    p.ignore_eos = true;
    std::vector<std::vector<std::int32_t>> prompts;
    for (int b = 0; b < max_batch; ++b)
      prompts.push_back(random_prompt(rng, std::min(8, options.max_context - 2), model.vocab_size()));
    (void)model.generate(prompts, p, {}, interrupted);
  }
  const double warmup_s = seconds(warm_start, Clock::now());

  std::vector<Test> tests;
  if (o.pp > 0) tests.push_back({fmt::format("pp{}", o.pp), true, o.pp, 1, {}, {}});
  if (o.tg > 0)
    for (int b : o.batches)
      tests.push_back({b == 1 ? fmt::format("tg{}", o.tg) : fmt::format("tg{} x{}", o.tg, b), false,
                       o.tg, b, {}, {}});
  // Reps are rounds over every test, so that a disturbance spreads over all of them.
  for (int r = 0; r < o.reps && !interrupted(); ++r) {
    for (Test& t : tests) {
      if (interrupted()) break;
      if (t.prefill)
        time_prefill(model, t, rng);
      else
        time_decode(model, t, rng);
      if (!t.tok_s.empty())
        say(fmt::format("rep {}/{}: {} {:.2f} tok/s", r + 1, o.reps, t.name, t.tok_s.back()));
    }
  }
  if (interrupted()) return std::nullopt;
  // Read before the second DRAM measurement, whose buffer would add to it.
  const std::uint64_t peak_rss = perf::peak_resident_bytes();
  perf::remeasure_dram(hw, limits, 5);
  const double dram_after = limits.dram_latest_all_threads;
  const double dram_best = limits.dram_gbps_all_threads;
  const std::array<double, 3> load_after = load_average();

  const std::uint64_t bpt = model.bytes_per_token();
  // Unset: each layer's family preference, or int8 in the compact mode (describe() names
  // what each layer runs).
  const std::string activation = o.request.activation ? std::string(to_string(*o.request.activation))
                                 : options.compact != CompactFormat::off ? "default (compact: int8)"
                                                      : "default";
  const std::uint64_t ckpt = checkpoint_bytes(o.model);
  Json j;
  j["model"] = printable(o.model);
  j["family"] = model.family();
  j["cpu"] = limits.cpu;
  j["threads"] = threads;
  j["activation"] = activation;
  j["batch_invariant"] = o.request.batch_invariant;
  j["prefill_chunk"] = options.prefill_chunk;
  j["compact"] = std::string(to_string(options.compact));
  j["max_context"] = options.max_context;
  j["reps"] = o.reps;
  j["seed"] = o.seed;
  j["describe"] = model.describe();
  j["load_s"] = load_s;
  j["warmup_s"] = warmup_s;
  j["peak_rss_bytes"] = peak_rss;
  j["peak_rss_from_load"] = peak_reset;  // false: since the process started (buffer included)
  j["checkpoint_bytes"] = ckpt;
  j["kv_cache_bytes"] = model.kv_cache_bytes();
  j["bytes_per_token"] = bpt;
  j["dram"] = {{"gbps_before", dram_before},
               {"gbps_after", dram_after},
               {"gbps_best", dram_best},
               {"passes", limits.dram_passes_all_threads},
               {"buffer_bytes", limits.dram_buffer_bytes}};
  j["load_average"] = {{"before", load_before}, {"after", load_after}};
  const double steal = limits.steal_pct();
  j["steal_pct_while_measuring_dram"] = std::isfinite(steal) ? Json(steal) : Json(nullptr);
  auto& results = j["results"] = Json::array();
  for (const Test& t : tests) {
    Json row;
    row["test"] = t.name;
    row["kind"] = t.prefill ? "prefill" : "decode";
    row["tokens"] = t.tokens;
    row["batch"] = t.batch;
    row["tok_s"] = summary_json(t.tok_s);
    row["seconds"] = summary_json(t.seconds);
    if (!t.prefill && t.batch == 1 && !t.tok_s.empty()) {
      // A decoded token reads bytes_per_token: the weight bytes per second that implies.
      const double gbps = static_cast<double>(bpt) * perf::summarize(t.tok_s).median / 1e9;
      row["weight_gbps"] = gbps;
      row["pct_dram"] = dram_best > 0 ? 100.0 * gbps / dram_best : 0.0;
    }
    results.push_back(row);
  }

  std::string text;
  if (o.json) {
    text = j.dump(2) + "\n";
  } else {
    text += fmt::format(
        "# mxmoe bench --whole: {} ({})\n\n{}, {} threads; dense matrices {}; activation {}{}; {} "
        "reps (median, min-max)\n\n",
        printable(o.model), model.family(), limits.cpu, threads,
        options.compact == CompactFormat::off ? std::string("as published")
                                              : fmt::format("compact {}", to_string(options.compact)),
        activation, o.request.batch_invariant ? ", batch-invariant" : "", o.reps);
    text += "| test | batch | tok/s (all sequences) | min-max | weight GB/s | % of DRAM |\n";
    text += "|---|---:|---:|---:|---:|---:|\n";
    for (const Json& row : results) {
      const Json& s = row["tok_s"];
      text += fmt::format("| {} | {} | {:.2f} | {:.2f}-{:.2f} | {} | {} |\n",
                          row["test"].get<std::string>(), row["batch"].get<int>(),
                          s["median"].get<double>(), s["min"].get<double>(), s["max"].get<double>(),
                          row.contains("weight_gbps")
                              ? fmt::format("{:.1f}", row["weight_gbps"].get<double>())
                              : std::string("-"),
                          row.contains("pct_dram")
                              ? fmt::format("{:.0f}%", row["pct_dram"].get<double>())
                              : std::string("-"));
    }
    text += fmt::format(
        "\nA decoded token reads {} of weights; DRAM read {:.1f} GB/s before, {:.1f} after "
        "(best pass {:.1f}, {} threads).\nLoad {:.2f} s (warm-up {:.2f} s); peak RSS {} "
        "(checkpoint {}, KV cache {}).\nLoad average {:.2f} before, {:.2f} after.\n",
        gb(static_cast<double>(bpt)), dram_before, dram_after, dram_best, threads, load_s, warmup_s,
        gb(static_cast<double>(peak_rss)), gb(static_cast<double>(ckpt)),
        gb(static_cast<double>(model.kv_cache_bytes())), load_before[0], load_after[0]);
  }
  return text;
}

}  // namespace mxmoe::cli
