// `mxmoe run`: one MoE layer through the oracle's choice. With no arguments: the gpt-oss-20b
// layer shape on deterministic random MXFP4 weights, a batch of random tokens, the
// selection (one line per candidate) and the time per call, tokens/s and weight GB/s.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "cli/run_common.hpp"
#include "io/npy.hpp"
#include "model/model_config.hpp"
#include "mxmoe/checkpoint.hpp"
#include "perf/workload.hpp"

namespace mxmoe::cli {
namespace {

// The pieces the three forms of run share (run_common.hpp).
using run_detail::candidate_line;
using run_detail::choice_json;
using run_detail::fill_random;
using run_detail::input_rows;
using run_detail::inputs_of;
using run_detail::progress;
using run_detail::require_finite;
using run_detail::require_io_memory;
using run_detail::run_expert_parallel;
using run_detail::run_layers;
using run_detail::RunOptions;
using run_detail::time_calls;
using run_detail::timing_json;
using run_detail::token_ids_for;
using run_detail::touched_weight_bytes;

int run(const RunOptions& o, CLI::App& sub) {
  // The input's rows are the tokens: a --tokens beside it would be silently ignored.
  if (!o.input.empty() && sub.count("--tokens") > 0)
    throw UsageError("--tokens and --input exclude each other: the tokens are the input's rows");
  if (const auto world = ep_world(o.ep.resolve(sub), sub)) {
    if (!o.layers.empty())
      throw UsageError(
          "--layers under mpirun: an expert-parallel run takes one layer (--layer N); run the "
          "stack in one process, or one mpirun per layer");
    return run_expert_parallel(o, sub, *world);
  }
  // Everything that can be refused cheaply is refused before loading or computing anything:
  // the flags, the environment, and whether --output can be written at all.
  const Request flags = o.request.resolve(sub);
  if (flags.ep_size > 1)
    throw UsageError(fmt::format(
        "an expert-parallel group of {} ranks (--ep-size or --placement) without mpirun: one "
        "process holds every expert; start the group with `mpirun -n {} mxmoe run ...` "
        "(`mxmoe explain --ep-size {}` shows it without running)",
        flags.ep_size, flags.ep_size, flags.ep_size));
  if (!o.layers.empty()) {
    if (!o.layer.from_model()) throw UsageError("--layers needs --model DIR");
    if (sub.count("--layer") > 0) throw UsageError("--layer and --layers exclude each other");
    if (o.layers != "all") {
      std::size_t listed = 0;
      try {
        listed = perf::parse_int_list(o.layers, "--layers", 0, kMaxModelLayers - 1).size();
      } catch (const std::invalid_argument& e) {
        throw UsageError(std::string(e.what()) + " ('all' or layer indices)");
      }
      // The stacked output has one slice per listed layer, in order: a repeat would shift
      // every later slice, so it is refused rather than dropped.
      if (listed != static_cast<std::size_t>(std::count(o.layers.begin(), o.layers.end(), ',')) + 1)
        throw UsageError("--layers: a layer is listed twice (in '" + o.layers + "')");
    }
  }
  if (!o.output.empty()) check_output("--output", o.output, inputs_of(o));
  // From here Ctrl-C, SIGTERM and SIGHUP end the calls and the write cleanly: exit 130, no
  // partial temporary of --output left (its write polls them), the previous file as it was.
  const StopOnSignal stop;
  if (!o.layers.empty()) return run_layers(o, flags);

  LayerSpec spec;
  std::optional<Checkpoint> checkpoint;
  std::optional<LayerStorage> storage;
  LayerWeights weights;
  if (o.layer.from_model()) {
    checkpoint.emplace(Checkpoint::open(o.layer.model));
    spec = checkpoint->layer_spec(o.layer.layer);
  } else {
    spec = o.layer.spec();
  }
  // The input is read (and refused) before any weight is generated or read.
  std::int64_t tokens = 0;
  std::vector<float> x = input_rows(o, spec.hidden, tokens);

  // The input and output alone must fit before any weight is generated or read (the layer's
  // workspace is added once the chosen backend is known, below).
  if (o.input.empty()) (void)require_io_memory(o, spec, o.request.tokens, nullptr);
  if (checkpoint) {
    weights = checkpoint->layer_weights(o.layer.layer);
  } else {
    progress(
        "mxmoe run: generating random MXFP4 weights for {} ({}, seed {})\n", spec.name,
        bytes_text(3.0 * spec.num_experts * spec.hidden * double{1} * spec.intermediate * 17 / 32),
        o.seed);
    storage.emplace(LayerStorage::random(spec, o.seed));
    weights = storage->weights();
  }

  const std::vector<std::int32_t> token_ids =
      token_ids_for(o, spec, fmt::format("layer {}", o.layer.layer), tokens);
  const std::int32_t* ids = token_ids.empty() ? nullptr : token_ids.data();

  Request request = flags;
  request.tokens_hint = static_cast<int>(tokens);
  const Deployment deployment{spec, o.hardware.resolve(), request};
  Selection selection = select(deployment, preferences_for(spec.family));
  if (o.hardware.replayed()) require_runnable_here(selection, HardwareOptions::live());

  Runtime runtime(request.threads);
  runtime.set_interrupt_check(&StopOnSignal::stop_requested);  // a long call ends at Ctrl-C
  MoeLayer layer(weights, selection, runtime);
  const double estimate = require_io_memory(o, spec, tokens, &layer);
  progress("mxmoe run: memory estimate {:.0f} bytes\n", estimate);
  if (x.empty()) fill_random(x, o.seed + 1, tokens * spec.hidden);
  std::vector<float> y(x.size());
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  progress("mxmoe run: {} on {} tokens, warm-up call...\n", selection.chosen, tokens);
  const auto w0 = Clock::now();
  layer.forward({.tokens = tokens, .x = x.data(), .y = y.data(), .token_ids = ids});
  const double warm = seconds(Clock::now() - w0);

  require_finite(o, y, tokens, spec.hidden);

  const auto [reps, median] = time_calls(o.reps, warm, true, [&] {
    layer.forward({.tokens = tokens, .x = x.data(), .y = y.data(), .token_ids = ids});
  });
  const double bytes = touched_weight_bytes(spec, weights, request, x, tokens, ids);

  if (!o.output.empty()) {
    const std::int64_t shape[] = {tokens, spec.hidden};
    write_npy(o.output, y, shape, &StopOnSignal::stop_requested);
  }

  const Selection& sel = layer.selection();
  if (o.json) {
    json::Json out = choice_json(spec, sel, request.batch_invariant);
    out["us_per_call_median"] = median * 1e6;
    out.update(timing_json(tokens, layer.threads(), reps, median, bytes, o.output));
    cli::print("{}\n", out.dump(2));
    return kExitOk;
  }
  cli::print("layer: {} (E={}, top-{}, H={}, I={}{}{})\n", spec.name, spec.num_experts, spec.top_k,
             spec.hidden, spec.intermediate,
             spec.shared_experts > 0 ? fmt::format(", shared I={} {}", spec.shared_intermediate,
                                                   to_string(spec.shared_weight_format))
                                     : "",
             spec.routing == RoutingMethod::hash
                 ? fmt::format(", hash-routed by token id over {} ids", spec.vocab)
                 : "");
  cli::print(
      "deployment: activation={}, batch_invariant={}, threads={}, tokens={} (preferences: {})\n",
      to_string(*sel.deployment.request.activation), request.batch_invariant, layer.threads(),
      tokens, sel.preferences_source);
  cli::print("candidates:\n");
  for (const Verdict& v : sel.candidates) cli::print("{}\n", candidate_line(sel, v));
  cli::print("chosen: {} ({})\n", sel.chosen, sel.why);
  cli::print("time: {:.1f} us/call (median of {} after a warm-up; {} threads)\n", median * 1e6,
             reps, layer.threads());
  cli::print(
      "throughput: {:.1f} tokens/s, {:.2f} GB/s of expert weights ({:.1f} MB touched per call)\n",
      static_cast<double>(tokens) / median, bytes / median / 1e9, bytes / 1e6);
  if (!o.output.empty())
    cli::print("output: {} [{} x {}] float32\n", o.output, tokens, spec.hidden);
  return kExitOk;
}

}  // namespace

void add_run(CLI::App& app, Action& action) {
  const auto [sub, opts] = add_command<RunOptions>(
      app, action, "run",
      "Run one MoE layer (a preset on generated random weights, or --model DIR --layer N) "
      "through the oracle's choice and time it",
      run);
  opts->request.tokens = 16;
  opts->layer.add(*sub);
  opts->hardware.add(*sub);
  opts->request.add(*sub);
  opts->ep.add(*sub);
  sub->add_option("--seed", opts->seed, "Seed of the random weights and tokens");
  sub->add_option(
         "--reps", opts->reps,
         fmt::format("Timed calls after the warm-up, 1..{} (default: ~3 s worth)", kMaxReps))
      ->check(CLI::Range(1, kMaxReps));
  sub->add_option("--input", opts->input, "Input tokens x [M, H] as a float32 .npy file");
  sub->add_option("--output", opts->output,
                  "Write the output y [M, H] as a float32 .npy file (whole or not at all; "
                  "checked writable before any work)");
  // (A missing file is an input error, exit 1, as for --input: read_token_ids says so.)
  sub->add_option("--token-ids", opts->token_ids,
                  "The tokens' ids [M] (.npy int32 or int64): what a hash-routed layer "
                  "(DeepSeek-V4's first layers) routes by; ignored by other layers");
  sub->add_flag("--json", opts->json, "Print the result as one JSON document");
  sub->add_option("--layers", opts->layers,
                  "With --model: 'all' MoE layers or a comma list of indices, timed as one step "
                  "through them (one shared runtime); each layer reads the same input, and "
                  "--output holds the outputs stacked [layers, M, H]");
}

}  // namespace mxmoe::cli
