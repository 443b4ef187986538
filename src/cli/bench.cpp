// `mxmoe bench`: times MoE layers per (backend, activation, threads, tokens) and relates
// them to this machine's measured limits (DRAM read bandwidth, instruction-class peaks).
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/file.hpp"
#include "cli/bench_ep.hpp"
#include "cli/bench_whole.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/ep.hpp"
#include "cli/llm_common.hpp"
#include "model/model_config.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/environment.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/model.hpp"
#include "mxmoe/runtime.hpp"
#include "mxmoe/weights.hpp"
#include "perf/perf.hpp"
#include "perf/workload.hpp"

namespace mxmoe::cli {

namespace {

struct BenchOptions {
  LayerOptions layer;
  std::string tokens = "1,8,64,512";
  std::string backends = "auto";
  std::string activations;
  std::string threads;
  std::vector<std::string> exclude;
  bool batch_invariant = false;
  int reps = 0;
  bool cache_resident = false;
  std::string format = "md";
  bool json = false;
  std::string output;  // a file for the report; "" = stdout
  bool limits_only = false;
  std::string layers;  // "" = one layer; preset: a count N; model: "all" or "0,3,5"
  std::uint64_t dram_buffer_mb = 0;
  std::uint64_t memory_budget_mb = 2048;
  double row_seconds = 0.3;
  double max_call_seconds = 5;
  EpOptions ep;
  std::string ep_tokens = "rank0";
  // --whole: the whole model (bench_whole.hpp)
  bool whole = false;
  int pp = 512, tg = 64;
  std::string batches = "1,8";
  std::uint64_t seed = 1;
  int prefill_chunk = 0;
  std::string compact;  // --whole --compact[=FORMAT]
};

// --output may not be a file of the checkpoint bench reads.
void check_output_file(const BenchOptions& o) {
  check_output("--output", o.output, CommandInputs().checkpoint("--model", o.layer.model));
}

void say(const std::string& line) {
  cli::print(stderr, "{}\n", line);
}

// Same computation, whatever the name (compared through the JSON form, which lists every
// field).
bool same_shape(LayerSpec a, const LayerSpec& b) {
  a.name = b.name;
  return to_json(a) == to_json(b);
}

// The weights the bench cycles through, and what owns them.
struct LayerSet {
  std::vector<LayerStorage> storages;
  std::unique_ptr<Checkpoint> checkpoint;
  std::unique_ptr<Runtime> model_runtime;  // the Model's (it binds no layer here)
  std::unique_ptr<Model> model;
  perf::BenchLayers layers;
};

// Weights stream from DRAM when the layers cycled through exceed 4x the last-level cache
// (plan_copies' rule); an unknown LLC size counts as streaming.
bool streams(std::uint64_t total_bytes, const Hardware& hw) {
  return hw.l3_bytes == 0 || total_bytes >= 4 * hw.l3_bytes;
}

std::string stack_mode(int layers, std::uint64_t total_bytes, const Hardware& hw) {
  return fmt::format("whole stack: {} layers per call, {:.2f} GB{}{}", layers,
                     static_cast<double>(total_bytes) / 1e9,
                     hw.l3_bytes > 0
                         ? fmt::format(" ({:.1f}x LLC)", static_cast<double>(total_bytes) /
                                                             static_cast<double>(hw.l3_bytes))
                         : std::string(" (LLC size unknown)"),
                     streams(total_bytes, hw) ? std::string()
                                              : std::string(" - below 4x LLC, weights may stay "
                                                            "cached"));
}

// --layers N on a preset: N distinct generated layers, one step through all of them per call.
LayerSet build_stack_from_preset(const BenchOptions& o, const Hardware& hw, int count) {
  LayerSet set;
  set.layers.spec = o.layer.spec();
  const std::uint64_t per_layer = perf::layer_weight_bytes(set.layers.spec);
  const std::uint64_t total = per_layer * static_cast<std::uint64_t>(count);
  require_memory(fmt::format("bench --layers {} of {}", count, set.layers.spec.name),
                 {{"layer weights", static_cast<double>(total)}}, "use fewer layers");
  say(fmt::format("building {} random {} layers ({:.2f} GB)...", count, set.layers.spec.name,
                  static_cast<double>(total) / 1e9));
  for (int c = 0; c < count; ++c)
    set.storages.push_back(
        LayerStorage::random(set.layers.spec, 1000 + static_cast<std::uint64_t>(c)));
  for (const LayerStorage& s : set.storages) set.layers.copies.push_back(s.weights());
  set.layers.layers_per_step = count;
  set.layers.streaming = streams(total, hw);
  set.layers.mode = stack_mode(count, total, hw) + " (generated weights)";
  return set;
}

// --model DIR --layers all|0,3,5: the model's MoE layers (through mxmoe::Model, which knows
// which layers are MoE layers and why the others are not), one step through them per call.
LayerSet build_stack_from_model(const BenchOptions& o, const Hardware& hw) {
  LayerSet set;
  set.model_runtime = std::make_unique<Runtime>(1);
  set.model = std::make_unique<Model>(o.layer.model, hw, *set.model_runtime);
  std::vector<int> wanted;
  if (o.layers == "all") {
    wanted = set.model->moe_layers();
  } else {
    try {
      wanted = perf::parse_int_list(o.layers, "--layers", 0, set.model->num_layers() - 1);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    for (int l : wanted)
      if (const std::string why = set.model->skip_reason(l); !why.empty())
        throw UsageError(fmt::format("--layers: layer {} is not run by mxmoe: {}", l, why));
  }
  if (wanted.empty()) throw LoadError(fmt::format("{}: no MoE layer mxmoe runs", o.layer.model));
  const Checkpoint& ckpt = set.model->checkpoint();
  // The bench routes at random (the routing given to forward): how a layer chooses its experts is
  // not what it times. DeepSeek-V4's hash layers (experts by token id) and routed layers (scores
  // with a selection bias) are benched as one shape: the first routed layer's, without the bias.
  int shape_layer = wanted.front();
  for (int l : wanted)
    if (ckpt.layer_spec(l).routing != RoutingMethod::hash) {
      shape_layer = l;
      break;
    }
  set.layers.spec = ckpt.layer_spec(shape_layer);
  const bool as_routed = set.layers.spec.routing != RoutingMethod::hash;
  if (as_routed) set.layers.spec.routing_params.selection_bias = false;
  bool mixed = false;
  for (int l : wanted) {
    LayerSpec s = ckpt.layer_spec(l);
    LayerWeights w = ckpt.layer_weights(l);
    if (as_routed) {
      mixed = mixed || s.routing == RoutingMethod::hash;
      if (s.routing == RoutingMethod::hash) {
        s.routing = set.layers.spec.routing;
        s.routing_params = set.layers.spec.routing_params;
        s.vocab = 0;
        w.token_experts = {};
      }
      s.routing_params.selection_bias = false;
      w.selection_bias = {};
    }
    if (!same_shape(s, set.layers.spec))
      throw LoadError(fmt::format(
          "{}: layer {} has another shape than layer {}; bench one step through layers of one "
          "shape (--layers with a list)",
          o.layer.model, l, shape_layer));
    set.layers.copies.push_back(w);
  }
  const std::uint64_t total =
      perf::layer_weight_bytes(set.layers.spec) * static_cast<std::uint64_t>(wanted.size());
  set.layers.layers_per_step = static_cast<int>(wanted.size());
  set.layers.streaming = streams(total, hw);
  set.layers.mode =
      stack_mode(static_cast<int>(wanted.size()), total, hw) + " (layers of " + o.layer.model +
      (mixed ? "; hash-routed layers timed as routed: the bench routes at random" : "") + ")";
  return set;
}

// --layers' syntax, checked before the machine is measured: with --preset one count of
// generated layers (returned); with --model 'all' or a list of indices (0 returned; the
// indices are checked against the model when it is opened).
int check_layers_flag(const BenchOptions& o) {
  if (o.layer.from_model()) {
    if (o.layers != "all") {
      try {
        (void)perf::parse_int_list(o.layers, "--layers", 0, kMaxModelLayers - 1);
      } catch (const std::invalid_argument& e) {
        throw UsageError(std::string(e.what()) + " (with --model: 'all' or layer indices)");
      }
    }
    return 0;
  }
  std::vector<int> count;
  try {
    count = perf::parse_int_list(o.layers, "--layers", 1, kMaxModelLayers);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string(e.what()) +
                     " (with --preset, --layers is a count of generated layers; 'all' and "
                     "lists need --model)");
  }
  if (count.size() != 1 || o.layers.find(',') != std::string::npos)
    throw UsageError("--layers: with --preset, give one count of generated layers");
  return count.front();
}

LayerSet build_layers(const BenchOptions& o, const Hardware& hw) {
  if (!o.layers.empty()) {
    if (o.layer.from_model()) return build_stack_from_model(o, hw);
    return build_stack_from_preset(o, hw, check_layers_flag(o));
  }
  LayerSet set;
  const std::uint64_t budget = o.memory_budget_mb << 20;
  if (!o.layer.from_model()) {
    set.layers.spec = o.layer.spec();
    const perf::CopyPlan plan = perf::plan_copies(perf::layer_weight_bytes(set.layers.spec),
                                                  hw.l3_bytes, budget, o.cache_resident);
    say(fmt::format("building {} random {} layer copies ({:.2f} GB)...", plan.copies,
                    set.layers.spec.name, static_cast<double>(plan.total_bytes) / 1e9));
    for (int c = 0; c < plan.copies; ++c)
      set.storages.push_back(
          LayerStorage::random(set.layers.spec, 1000 + static_cast<std::uint64_t>(c)));
    for (const LayerStorage& s : set.storages) set.layers.copies.push_back(s.weights());
    set.layers.streaming = !o.cache_resident && streams(plan.total_bytes, hw);
    set.layers.mode = plan.mode;
    return set;
  }
  // A checkpoint: distinct copies are the model's other layers of the same shape.
  set.checkpoint = std::make_unique<Checkpoint>(Checkpoint::open(o.layer.model));
  set.layers.spec = set.checkpoint->layer_spec(o.layer.layer);
  const std::uint64_t per_copy = perf::layer_weight_bytes(set.layers.spec);
  const perf::CopyPlan wanted = perf::plan_copies(per_copy, hw.l3_bytes, budget, o.cache_resident);
  const int n = set.checkpoint->num_layers();
  for (int i = 0; i < n && static_cast<int>(set.layers.copies.size()) < wanted.copies; ++i) {
    const int l = (o.layer.layer + i) % n;
    try {
      if (l != o.layer.layer && !same_shape(set.checkpoint->layer_spec(l), set.layers.spec))
        continue;
      set.layers.copies.push_back(set.checkpoint->layer_weights(l));
    } catch (const LoadError&) {
      continue;  // not a MoE layer
    }
  }
  const auto found = static_cast<std::uint64_t>(set.layers.copies.size());
  set.layers.streaming = !o.cache_resident && streams(found * per_copy, hw);
  set.layers.mode =
      perf::plan_copies(per_copy, hw.l3_bytes, std::min(budget, found * per_copy), o.cache_resident)
          .mode +
      fmt::format(" (layers of {} from {})", o.layer.model, o.layer.layer);
  return set;
}

std::vector<std::string> backend_list(const std::string& text, const std::string& what) {
  std::vector<std::string> names;  // each once (a former and a current name are one)
  for (const std::string& given : perf::parse_name_list(text, what)) {
    const std::string n = given == "auto" ? given : require_backend_name(given, what);
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  return names;
}

// The report to OUTPUT (whole or not at all), or stdout when it is "".
void emit(const std::string& output, const std::string& text) {
  if (output.empty()) {
    cli::print("{}", text);
  } else {
    files::write_file_atomically(output, text);
    say("bench: wrote " + output);
  }
}

// The flags that only the layer bench reads, and those only --whole reads.
constexpr const char* kLayerOnlyFlags[] = {
    "--preset",           "--layer",       "--layers",           "--tokens",
    "--cache-resident",   "--limits",      "--memory-budget-mb", "--row-seconds",
    "--max-call-seconds", "--ep-tokens",   "--ep-deadline",      "--format"};
constexpr const char* kWholeOnlyFlags[] = {"--pp", "--tg", "--batch", "--seed",
                                           "--prefill-chunk", "--compact"};

// `bench --model DIR --whole`: the flags turned into WholeBenchOptions (UsageError for a flag
// of the layer bench, a list where one value is meant, a number out of range).
int run_whole_bench(const BenchOptions& o, CLI::App& sub) {
  for (const char* flag : kLayerOnlyFlags)
    if (sub.count(flag) > 0)
      throw UsageError(fmt::format(
          "{} is a flag of the layer bench; --whole times the whole model (--pp, --tg, --batch)",
          flag));
  if (!o.layer.from_model()) throw UsageError("--whole needs --model DIR (a whole checkpoint)");
  if (o.pp == 0 && o.tg == 0) throw UsageError("--pp 0 and --tg 0: nothing to time");
  if (!o.output.empty()) check_output_file(o);
  WholeBenchOptions w;
  w.model = o.layer.model;
  w.pp = o.pp;
  w.tg = o.tg;
  w.reps = o.reps > 0 ? o.reps : 3;
  w.seed = o.seed;
  w.prefill_chunk = o.prefill_chunk;
  w.compact = compact_format(o.compact);
  w.dram_buffer_bytes = o.dram_buffer_mb << 20;
  w.json = o.json;
  RequestOverrides r;
  try {
    w.batches = perf::parse_int_list(o.batches, "--batch", 1, 4096);
    if (!o.threads.empty()) {
      const std::vector<int> t = perf::parse_int_list(o.threads, "--threads", 0, kMaxThreads);
      if (t.size() != 1) throw std::invalid_argument("--threads: one count with --whole");
      r.threads = t.front();
    }
    if (!o.activations.empty()) {
      if (o.activations.find(',') != std::string::npos)
        throw std::invalid_argument("--activation: one format with --whole");
      r.activation = o.activations;
    }
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (o.backends != "auto") {
    if (o.backends.find(',') != std::string::npos)
      throw UsageError("--backend: one backend (or auto) with --whole");
    r.forced_backend = require_backend_name(o.backends, "--backend");
  }
  if (sub.count("--exclude") > 0) {
    std::vector<std::string> excluded;
    for (const std::string& n : o.exclude) excluded.push_back(require_backend_name(n, "--exclude"));
    r.excluded_backends = excluded;
  }
  if (sub.count("--batch-invariant") > 0) r.batch_invariant = o.batch_invariant;
  w.request = apply_request_overrides(environment().request, r, [](std::string_view field) {
    if (field == "forced_backend") return std::string("--backend");
    if (field == "excluded_backends") return std::string("--exclude");
    std::string flag = "--" + std::string(field);
    std::replace(flag.begin(), flag.end(), '_', '-');
    return flag;
  });
  const std::optional<std::string> text = bench_whole_model(w);
  if (!text) return kExitInterrupted;
  emit(o.output, *text);
  return kExitOk;
}

// --exclude as given, else MXMOE_EXCLUDE's backends (each name checked).
std::vector<std::string> excluded_backends(const BenchOptions& o, CLI::App& sub) {
  std::vector<std::string> excluded = environment().request.excluded_backends;
  if (sub.count("--exclude") > 0) {
    excluded.clear();
    for (const std::string& n : o.exclude) excluded.push_back(require_backend_name(n, "--exclude"));
  }
  return excluded;
}

// Under mpirun, what the expert-parallel bench does not do is refused, never silently dropped.
void refuse_flags_under_mpirun(const BenchOptions& o, CLI::App& sub) {
  if (o.json || o.format != "md")
    throw UsageError("bench under mpirun writes a markdown report (no --json or --format)");
  if (!o.layers.empty())
    throw UsageError(
        "--layers under mpirun: an expert-parallel bench times one layer (--layer N); time "
        "the stack in one process");
  for (const char* flag : {"--limits", "--cache-resident", "--dram-buffer-mb", "--memory-budget-mb",
                           "--row-seconds", "--max-call-seconds"})
    if (sub.count(flag) > 0)
      throw UsageError(fmt::format(
          "{} under mpirun: the expert-parallel bench times one layer with --reps calls per "
          "row (default: about 1 s worth, 3 to 200); run {} in one process",
          flag, flag));
  for (const auto& [flag, value] :
       {std::pair<const char*, const std::string*>{"--backend", &o.backends},
        std::pair<const char*, const std::string*>{"--activation", &o.activations}})
    if (value->find(',') != std::string::npos)
      throw UsageError(fmt::format(
          "{} {}: under mpirun, one value per run (the group agrees on one backend and one "
          "activation format)",
          flag, *value));
}

// `mpirun -n N mxmoe bench`: one layer over the ranks of an expert-parallel group.
int run_ep_bench(const BenchOptions& o, CLI::App& sub, Communicator& world) {
  refuse_flags_under_mpirun(o, sub);
  if (world.rank() == 0 && !o.output.empty()) check_output_file(o);
  EpBenchOptions e;
  e.layer = o.layer;
  try {
    e.tokens = perf::parse_int_list(o.tokens, "--tokens", 1, kMaxTokensPerCall);
    if (!o.activations.empty()) {
      e.activation = o.activations;
      (void)parse_activation_format(o.activations);
    }
    if (!o.threads.empty()) {
      const std::vector<int> t = perf::parse_int_list(o.threads, "--threads", 0, kMaxThreads);
      if (t.size() != 1) throw std::invalid_argument("--threads: one count per rank under mpirun");
      e.threads = t.front();
    }
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  }
  if (o.backends != "auto") e.backend = require_backend_name(o.backends, "--backend");
  e.excluded = excluded_backends(o, sub);
  e.batch_invariant = o.batch_invariant;
  e.reps = o.reps;
  e.tokens_on_every_rank = o.ep_tokens == "all";
  e.output = o.output;
  return bench_expert_parallel(e, world);
}

// The layer bench's report format; --output a file name (not a format's) that the bench may
// write.
perf::OutputFormat report_format(const BenchOptions& o) {
  const perf::OutputFormat format = perf::parse_output_format(o.json ? "json" : o.format);
  if (o.output == "md" || o.output == "json" || o.output == "csv")
    throw UsageError(
        fmt::format("--output takes a file name; for the {} format use --format {} "
                    "(or --json)",
                    o.output, o.output));
  if (!o.output.empty()) check_output_file(o);
  return format;
}

// The flags as the rows' axes and limits (UsageError for a list or name that does not parse).
perf::BenchConfig bench_config(const BenchOptions& o, CLI::App& sub) {
  perf::BenchConfig config;
  try {
    config.tokens = perf::parse_int_list(o.tokens, "--tokens", 1, kMaxTokensPerCall);
    if (!o.activations.empty()) {
      config.activations = perf::parse_name_list(o.activations, "--activation");
      for (const std::string& a : config.activations) (void)parse_activation_format(a);
    }
    if (!o.threads.empty()) {
      // 0 means all logical CPUs, as for `run --threads 0`.
      for (int t : perf::parse_int_list(o.threads, "--threads", 0, kMaxThreads))
        config.threads.push_back(t == 0 ? default_thread_count() : t);
    }
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  config.backends = backend_list(o.backends, "--backend");
  config.request.excluded_backends = excluded_backends(o, sub);
  config.request.batch_invariant = o.batch_invariant;
  config.reps = o.reps;
  config.row_seconds = o.row_seconds;
  config.max_call_seconds = o.max_call_seconds;
  config.progress = say;
  return config;
}

// Every memory check of the layer bench refuses what would not fit (require_memory) and keeps
// the most any check found the bench would hold, reported at the end (the accuracy of the
// estimate is measured: docs/RELIABILITY.md, memory). Copies share the figure.
struct MemoryEstimate {
  std::shared_ptr<double> most = std::make_shared<double>(0.0);
  void check(const std::string& what,
             const std::vector<std::pair<std::string, double>>& parts) const {
    *most = std::max(
        *most,
        require_memory(what, parts, "use fewer tokens, copies (--memory-budget-mb) or layers"));
  }
};

// A preset's inputs and generated copies, checked before the machine's limits are measured
// (the stack's weights are checked when they are built: build_stack_from_preset).
void check_preset_fits(const BenchOptions& o, const perf::BenchConfig& config, const Hardware& hw,
                       const MemoryEstimate& estimate) {
  if (o.limits_only || o.layer.from_model()) return;
  const LayerSpec spec = o.layer.spec();
  // The copies build_layers will generate (the budget is only their upper bound).
  const double copies_bytes =
      o.layers.empty()
          ? static_cast<double>(perf::plan_copies(perf::layer_weight_bytes(spec), hw.l3_bytes,
                                                  o.memory_budget_mb << 20, o.cache_resident)
                                    .total_bytes)
          : 0.0;
  const double m = *std::max_element(config.tokens.begin(), config.tokens.end());
  const double row = static_cast<double>(spec.hidden) * sizeof(float);
  estimate.check(fmt::format("bench: {} tokens of {}", m, spec.name),
                 {{"input", m * row}, {"output", m * row}, {"layer copies", copies_bytes}});
}

// measure_limits reads a buffer of its own first (freed before any layer is built).
perf::MachineLimits measure_machine(const BenchOptions& o, const Hardware& hw,
                                    const MemoryEstimate& estimate) {
  estimate.check("bench: the DRAM bandwidth buffer",
                 {{"buffer", static_cast<double>(perf::dram_buffer_bytes(
                                 hw, o.dram_buffer_mb << 20, std::max(1, hw.logical_cpus)))}});
  say("measuring machine limits...");
  perf::LimitsOptions limits_options;
  limits_options.dram_buffer_bytes = o.dram_buffer_mb << 20;
  return perf::measure_limits(hw, limits_options);
}

// The report in its format; the notes of a json or csv report go to stderr.
std::string report_text(perf::OutputFormat format, const perf::BenchReport& report,
                        const perf::MachineLimits& limits) {
  std::string text;
  switch (format) {
    case perf::OutputFormat::md:
      text = perf::to_markdown(report);
      break;
    case perf::OutputFormat::json:
      text = perf::to_json(report);
      for (const std::string& n : report.notes) say("note: " + n);
      break;
    case perf::OutputFormat::csv:
      cli::print(stderr, "{}\n{}\n", perf::format_limits_markdown(limits), report.mode);
      text = perf::to_csv(report);
      for (const std::string& n : report.notes) say("note: " + n);
      break;
  }
  return text;
}

// `mxmoe bench` in one process: the machine's limits, then (unless --limits) the layer's rows.
int run_layer_bench(const BenchOptions& o, CLI::App& sub) {
  // Flags and the output file are checked before the minutes of measuring.
  const perf::OutputFormat format = report_format(o);
  perf::BenchConfig config = bench_config(o, sub);
  const MemoryEstimate estimate;
  config.check_memory = [estimate](const std::string& what,
                                   const std::vector<std::pair<std::string, double>>& parts) {
    estimate.check("bench: " + what, parts);
  };
  if (!o.layers.empty()) {
    if (o.cache_resident)
      throw UsageError("--layers times the whole stack as it streams; drop --cache-resident");
    (void)check_layers_flag(o);
  }

  const Hardware hw = HardwareOptions::live();
  check_preset_fits(o, config, hw, estimate);
  const perf::MachineLimits limits = measure_machine(o, hw, estimate);

  perf::BenchReport report;
  report.machine = limits;
  if (!o.limits_only) {
    LayerSet set = build_layers(o, hw);
    say(set.layers.mode);
    report = perf::run_bench(set.layers, hw, limits, config);
  }
  const std::string text = report_text(format, report, limits);
  say(fmt::format("bench: memory estimate {:.0f} bytes (the most any check found)",
                  *estimate.most));
  emit(o.output, text);
  return kExitOk;
}

int run_bench_command(const BenchOptions& o, CLI::App& sub) {
  if (o.whole) return run_whole_bench(o, sub);
  for (const char* flag : kWholeOnlyFlags)
    if (sub.count(flag) > 0) throw UsageError(fmt::format("{} needs --whole", flag));
  if (const auto world = ep_world(o.ep.resolve(sub), sub)) return run_ep_bench(o, sub, *world);
  return run_layer_bench(o, sub);
}

}  // namespace

void add_bench(CLI::App& app, Action& action) {
  const auto [sub, o] = add_command<BenchOptions>(
      app, action, "bench",
      "Time MoE layers per backend, activation, thread count and batch size, against this "
      "machine's measured DRAM bandwidth and compute peaks; with --whole, a whole model's "
      "prefill and decode as llama-bench times them",
      run_bench_command);
  sub->footer(
      "Layers:\n"
      "  mxmoe bench --preset gpt-oss-20b --tokens 1,8,512 --threads 2\n"
      "  mxmoe bench --model DIR --layers all --tokens 1\n"
      "A whole model (--whole), as llama-bench times one:\n"
      "  mxmoe bench --model DIR --whole --pp 512 --tg 64 --batch 1,8 --reps 5 --threads 2\n"
      "  pp512:    prefill of a 512-token random prompt (seeded ids in the vocabulary); tok/s =\n"
      "            512 / the time to the first new token\n"
      "  tg64:     64 decode steps of one sequence after a one-token prompt; tok/s = 64 / their "
      "time\n"
      "  tg64 x8:  8 sequences decoded at once; tok/s counts all 8\n"
      "Each rep is one round over every test; the report gives the median and min-max, the bytes "
      "a decoded token reads (weights of the active experts, attention, the LM head), the GB/s "
      "they imply at batch 1 and their share of the DRAM read bandwidth measured before and "
      "after the runs (best pass), the load time, the peak RSS and the load average (a busy "
      "machine shows there). --activation, --batch-invariant, --backend, --exclude and --threads "
      "(one value each) are the request, as for `mxmoe complete`. --json: one document.");
  o->layer.add(*sub);
  sub->add_option("--tokens", o->tokens,
                  fmt::format("Tokens per call, comma list of 1..{}", kMaxTokensPerCall))
      ->capture_default_str();
  sub->add_option("--backend", o->backends,
                  "Backends, comma list; auto = the oracle's choice for each row")
      ->capture_default_str();
  sub->add_option("--activation", o->activations,
                  "Activation formats, comma list (f32, bf16, int8, mxfp8; default: the model "
                  "family's preference)");
  sub->add_option("--threads", o->threads,
                  fmt::format("Thread counts, comma list of 0..{} (0 = all logical CPUs, as for "
                              "`run --threads 0`; default: 1 and all CPUs)",
                              kMaxThreads));
  sub->add_option("--exclude", o->exclude, "Exclude backends from auto (comma list)")
      ->delimiter(',');
  sub->add_flag("--batch-invariant", o->batch_invariant, "Request batch-invariant backends");
  sub->add_option("--reps", o->reps,
                  fmt::format("Timed calls per row, 1..{} (default: enough for --row-seconds, at "
                              "least 3; with --whole: rounds over the tests, default 3)",
                              kMaxReps))
      ->check(CLI::Range(1, kMaxReps));
  sub->add_option("--layers", o->layers,
                  "The whole MoE stack: each call is one step through several layers on one "
                  "shared runtime. With --preset: a count N of distinct generated layers (24 for "
                  "gpt-oss-20b's whole stack, ~10 GB); with --model: 'all' (every MoE layer) or "
                  "a comma list of layer indices");
  sub->add_flag("--cache-resident", o->cache_resident,
                "Time one layer copy (weights may stay in cache) instead of streaming copies "
                "that exceed 4x the last-level cache");
  sub->add_option("--format", o->format, "Report format: md, json, csv")
      ->check(CLI::IsMember({"md", "json", "csv"}))
      ->capture_default_str();
  sub->add_flag("--json", o->json, "The report as one JSON document (= --format json)");
  sub->add_option("-o,--output", o->output,
                  "Write the report to this file (whole or not at all; checked writable before "
                  "measuring) instead of stdout");
  sub->add_flag("--limits", o->limits_only, "Only measure and print this machine's limits");
  // MiB counts are shifted into bytes: bounded so the shift cannot wrap (1 TiB at most).
  sub->add_option("--dram-buffer-mb", o->dram_buffer_mb,
                  "Buffer read for the DRAM bandwidth, 1..1048576 MiB (default: 4x the "
                  "last-level cache, at least 256 MiB)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20));
  sub->add_option("--memory-budget-mb", o->memory_budget_mb,
                  "Most weight bytes of streamed layer copies, 1..1048576 MiB")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20));
  sub->add_option("--row-seconds", o->row_seconds,
                  "Timed seconds aimed at per row (auto reps), in [0.000001, 3600]")
      ->capture_default_str()
      ->check(finite_in(1e-6, 3600));
  sub->add_option("--max-call-seconds", o->max_call_seconds,
                  "Skip rows predicted to take longer than this per call, in [0.000001, 86400]")
      ->capture_default_str()
      ->check(finite_in(1e-6, 86400));
  sub->add_flag("--whole", o->whole,
                "Time the whole model of --model (prefill and decode, as llama-bench) instead "
                "of its MoE layers");
  sub->add_option("--pp", o->pp,
                  "--whole: prompt tokens of the prefill test, 0..1048576 (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--tg", o->tg,
                  "--whole: tokens decoded per sequence, 0..1048576 (0: no decode test)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--batch", o->batches,
                  "--whole: sequences decoded at once, comma list of 1..4096 (one decode test "
                  "each)")
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "--whole: seed of the random prompts' token ids")
      ->capture_default_str();
  sub->add_option("--prefill-chunk", o->prefill_chunk,
                  "--whole: prompt rows per step (default: the library's, as `complete` runs)")
      ->check(CLI::Range(1, kMaxTokensPerCall));
  add_compact_flag(*sub, o->compact);
  o->ep.add(*sub);
  sub->add_option("--ep-tokens", o->ep_tokens,
                  "Under mpirun: where the tokens are, rank0 (as `mxmoe run`) or all (split "
                  "evenly, as data-parallel attention feeds expert-parallel MoE)")
      ->check(CLI::IsMember({"rank0", "all"}))
      ->capture_default_str();
}

}  // namespace mxmoe::cli
