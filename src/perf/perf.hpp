// Performance measurement: this machine's limits (DRAM read bandwidth, compute peaks per
// instruction class) and the `mxmoe bench` driver that times MoE layers against them.
// Speed is measured here and in bench/, never asserted in tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mxmoe/deployment.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::perf {

// The peak of one instruction class, measured with independent dependency chains so that
// only issue throughput limits it. A pass is the best of 16 runs of about 1 ms; the class is
// measured in several passes spread over a run, and the figures are the best pass.
struct Peak {
  std::string name;        // "fp32_fma_avx512", "int8_vnni_avx512", "int8_amx", ...
  std::string unit;        // "GFLOP/s" or "GOP/s" (one multiply-add counts 2)
  bool measured = false;   // false: skipped, `note` says why
  double per_core = 0;     // one thread: the best pass
  double all_threads = 0;  // MachineLimits::threads threads at once: the best pass
  std::string note;
  // Every pass, in order (same unit); the latest pass of each, which a bench row compares
  // with (the readings next to it).
  std::vector<double> passes_per_core, passes_all_threads;
  double latest_per_core = 0, latest_all_threads = 0;
  // The instruction's documented issue rate on this CPU's cores, in ops per cycle per core
  // (e.g. 1024 for TDPBF16PS: 16x16x32 products every 16 cycles), and where it is from; 0
  // where no figure is known for this CPU. per_core / ops_per_cycle is the clock a pass
  // implies.
  double ops_per_cycle = 0;
  std::string rate_source;

  double implied_ghz() const { return ops_per_cycle > 0 ? per_core / ops_per_cycle : 0; }
  // The latest pass at a thread count (1: per core, MachineLimits::threads: all, linear in
  // between); 0 when not measured.
  double latest(int thread_count, int machine_threads) const;
};

// CPU time from /proc/stat (all CPUs): the ticks the hypervisor gave to other guests
// ("steal") and all ticks. `known` is false where the kernel does not report steal time.
struct StealTicks {
  std::uint64_t steal = 0, total = 0;
  bool known = false;
};
StealTicks steal_ticks();
// The % of CPU time stolen between `since` and now; NaN when unknown.
double steal_pct_since(const StealTicks& since);

struct MachineLimits {
  std::string cpu;
  int threads = 0;  // "all threads" in the figures below
  std::uint64_t l3_bytes = 0;
  std::uint64_t dram_buffer_bytes = 0;  // the buffer read for the bandwidth figures
  double dram_gbps_one_thread = 0;      // GB/s = 1e9 bytes/s, the best pass of all below
  double dram_gbps_all_threads = 0;
  // Every pass over the buffer (GB/s), in order: measure_limits measures once (5 passes),
  // remeasure_dram (e.g. next to every bench row) adds more. Their spread says how noisy the
  // machine was.
  std::vector<double> dram_passes_one_thread, dram_passes_all_threads;
  int dram_measurements = 0;
  // The best pass of the latest DRAM measurement (a bench row's neighbour reading).
  double dram_latest_one_thread = 0, dram_latest_all_threads = 0;
  std::vector<Peak> peaks;
  int peak_measurements = 0;  // rounds over every usable class (remeasure_peak adds single passes)
  // CPU time the hypervisor gave to other guests while measuring, summed over every
  // measurement (steal_pct(): % of this machine's CPU time; NaN where the kernel does not say).
  StealTicks steal_while_measuring;
  double measure_seconds = 0;  // wall time spent measuring

  // Bandwidth / peak for a thread count: the one-thread figure for 1, the all-threads
  // figure from `threads` up, linear in between. 0 when unknown.
  double dram_gbps(int thread_count) const;
  double peak(const std::string& name, int thread_count) const;
  double latest_dram_gbps(int thread_count) const;       // the same from the latest measurement
  const Peak* find_peak(const std::string& name) const;  // nullptr when absent
  double steal_pct() const;
};

struct LimitsOptions {
  std::uint64_t dram_buffer_bytes = 0;  // 0: 4 x the last-level cache (at least 256 MiB)
  int threads = 0;                      // 0: hw.logical_cpus
  int peak_passes = 5;                  // rounds over the classes, 1..1000
};

// Bytes of the buffer the DRAM bandwidth is read from: REQUESTED (0: 4 x the last-level cache,
// at least 256 MiB) rounded to 2 MiB per thread of THREADS.
std::uint64_t dram_buffer_bytes(const Hardware& hw, std::uint64_t requested, int threads);

// Measures this machine (about 2-4 s): the DRAM read bandwidth (5 passes per thread count),
// then `peak_passes` rounds over the instruction classes, so that each class's passes are
// spread over the measurement. Each ISA loop runs only when `hw` says the instruction set is
// usable; otherwise its Peak says why it was skipped.
MachineLimits measure_limits(const Hardware& hw, const LimitsOptions& options = {});

// Measures the DRAM read bandwidth again (same buffer size and threads, `passes` per thread
// count) and adds the passes to `limits`; the readings become the best pass of all
// measurements, the latest ones this measurement's best.
void remeasure_dram(const Hardware& hw, MachineLimits& limits, int passes = 5);
// One more pass of the named class (nothing when it is absent or was not measured).
void remeasure_peak(const Hardware& hw, MachineLimits& limits, const std::string& name);

// The peak class of the registered backend called BACKEND (Backend::peak_class(), set in its
// description); "" for a name no registered backend answers to.
std::string peak_class_for_backend(const std::string& backend);
// The compute peak classes measure_limits knows (its peak loops, usable here or not):
// "fp32_fma_avx512", "fp32_fma_avx2", ..., "int8_sdot_sve".
std::vector<std::string> peak_class_names();

// ---- the bench driver -------------------------------------------------------------------

// The layers to time (views that must outlive the run).
// - Layer mode (layers_per_step = 1): `copies` are distinct weight sets of one spec; calls
//   cycle through them so that weights stream from DRAM.
// - Stack mode (layers_per_step = copies.size()): `copies` are the N MoE layers of a model
//   (or N generated layers); one call is one decode/prefill step through all of them in
//   order, every layer on its own routing, all on one shared Runtime.
struct BenchLayers {
  LayerSpec spec;
  std::vector<LayerWeights> copies;
  int layers_per_step = 1;
  bool streaming = true;  // false: cache-resident on purpose, pct_bw may exceed 100
  std::string mode;       // "streaming: 5 copies, 2.1 GB (4.4x LLC)" or "cache-resident: ..."
};

struct BenchConfig {
  std::vector<int> tokens{1, 8, 64, 512};
  std::vector<std::string> backends{"auto"};  // "auto" = the oracle's choice
  std::vector<std::string> activations;       // keys; empty = the family's default
  std::vector<int> threads;                   // empty = {1, all logical CPUs}
  // Timed calls per row; 0: enough for `row_seconds`, at least kMinAutoReps and at least one
  // call per layer copy. Every row first runs one untimed call on every copy (its first call
  // is reported as first_call_us), so timed calls are steady-state.
  int reps = 0;
  double row_seconds = 0.3;     // timed seconds aimed at per row (auto reps)
  double row_max_seconds = 6;   // auto reps shrink (down to 1) to stay under this
  double max_call_seconds = 5;  // rows predicted slower than this per call are skipped
  // What every row's request shares (excluded_backends, batch_invariant); a row sets its
  // activation, threads, tokens_hint and forced_backend.
  Request request;
  // Measure the limits next to every row: the DRAM read bandwidth (3 passes per thread
  // count) and the row's peak class (one pass) right after it, so that a row's fractions are
  // of the readings taken just before and just after it (the better of the two), not of
  // readings minutes away. A streaming row above 100% of its reading is measured again (at
  // most twice). false: every row is compared with `limits` as given.
  bool remeasure_dram = true;
  std::function<void(const std::string&)> progress;  // one line per row; may be empty
  // Called with every byte the bench will hold, by part, before it allocates them: before the
  // layers of a selection are packed (with the packed bytes of the first copy, measured) and
  // before a row's first call at a new size (which grows every copy's workspace). It may
  // throw to refuse (the CLI compares the sum with MemAvailable). May be empty.
  std::function<void(const std::string& what, const std::vector<std::pair<std::string, double>>&)>
      check_memory;
};

inline constexpr int kMinAutoReps = 5;

struct BenchRow {
  std::string backend, activation;
  int threads = 0, tokens = 0, reps = 0;
  int layers = 1;  // layers per call: 1, or N for a step through the whole stack
  double us_median = 0, us_sd = 0;
  double us_p10 = 0, us_p90 = 0;  // spread of the timed calls
  double first_call_us = 0;       // the row's first (untimed) call: at a new size its workspace
                                  // grows; on a fresh layer, packed pages fault in
  double tokens_per_s = 0;        // tokens / median call (a call is one step through `layers`)
  double touched_bytes = 0;       // expert weight bytes a call reads (mean over the timed calls)
  double weight_gbps = 0;         // touched_bytes / median call
  double gflops = 0;              // layers x 2 x tokens x (top_k x 3 x H x I + 3 x H x Is) / time
  double pct_bw = 0;              // of dram_gbps_near
  double pct_peak = 0;            // of peak_near
  std::string peak_class;         // "" when the class is unknown (pct_peak is then NaN)
  // The readings the fractions are of: with BenchConfig::remeasure_dram, the better of the
  // measurements just before and just after this row at its thread count; else the limits.
  double dram_gbps_near = 0;
  double peak_near = 0;  // 0 when the class is unknown or unmeasured
  double steal_pct = 0;  // CPU time stolen by other guests during the timed calls; NaN unknown
};

struct BenchReport {
  MachineLimits machine;
  std::string layer;  // spec name
  std::string mode;
  std::vector<BenchRow> rows;
  std::vector<std::string> notes;  // skipped combinations, with the oracle's first reason
};

// Times every (backend, activation, threads, tokens) the oracle accepts on `hw`.
// Throws std::invalid_argument for an unknown backend name or activation key.
BenchReport run_bench(const BenchLayers& layers, const Hardware& hw, const MachineLimits& limits,
                      const BenchConfig& config);

enum class OutputFormat : std::uint8_t { md, json, csv };
OutputFormat parse_output_format(const std::string& key);  // throws std::invalid_argument

// {"machine": {...}, "layer", "mode", "results": [{"backend", "activation", "threads",
// "tokens", "layers", "reps", "us_median", "us_sd", "us_p10", "us_p90", "first_call_us",
// "tokens_per_s", "touched_bytes", "weight_gbps", "gflops", "pct_bw", "pct_peak",
// "dram_gbps_near", "peak_near", "steal_pct"}, ...],
// "notes": [...]} (a NaN is written as null).
std::string to_json(const BenchReport& report);
std::string to_markdown(const BenchReport& report);  // limits, mode, table, notes
std::string to_csv(const BenchReport& report);       // header + one line per row
std::string format_limits_markdown(const MachineLimits& limits);

}  // namespace mxmoe::perf
