// `mxmoe run`: one MoE layer through the oracle's choice. With no arguments: the gpt-oss-20b
// layer shape on deterministic random MXFP4 weights, a batch of random tokens, the
// selection (one line per candidate) and the time per call, tokens/s and weight GB/s.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/file.hpp"
#include "base/json.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/ep.hpp"
#include "model/model_config.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/expert_parallel.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/model.hpp"
#include "mxmoe/npy.hpp"
#include "mxmoe/routing.hpp"
#include "perf/memory.hpp"
#include "perf/workload.hpp"

namespace mxmoe::cli {
namespace {

struct RunOptions {
  LayerOptions layer;
  HardwareOptions hardware;
  RequestOptions request;
  EpOptions ep;
  std::uint64_t seed = 1;
  int reps = 0;  // 0: as many as fit in about 3 s (at least 1)
  std::string input, output, token_ids;
  bool json = false;
  std::string layers;  // --layers all|0,3,5 (with --model): a step through several layers
};

// Every file run reads: --output may be none of them.
CommandInputs inputs_of(const RunOptions& o) {
  CommandInputs inputs;
  inputs.checkpoint("--model", o.layer.model)
      .file("--input", o.input)
      .file("--token-ids", o.token_ids)
      .file("--hardware", o.hardware.file)
      .file("--placement", o.request.placement);
  return inputs;
}

// Progress (stderr), flushed so it shows while the command works.
template <class... Args>
void progress(fmt::format_string<Args...> f, Args&&... args) {
  fmt::print(stderr, f, std::forward<Args>(args)...);
  std::fflush(stderr);
}

std::string candidate_line(const Selection& s, const Verdict& v) {
  const std::string mark = v.name == s.chosen ? "*" : " ";
  if (v.supported)
    return fmt::format("{} {:<13} supported  ~{:.0f} us/call (estimate)", mark, v.name,
                       v.estimated_us);
  const Rejection& r = v.reasons.front();
  return fmt::format("{} {:<13} rejected   {}: {}{}", mark, v.name, to_string(r.code), r.detail,
                     v.reasons.size() > 1 ? fmt::format(" (+{} more)", v.reasons.size() - 1) : "");
}

// Bytes of the expert weights one call reads on rank r.ep_rank: every distinct expert of
// that rank the routing touches, plus the shared expert (each rank runs it on its tokens).
double touched_weight_bytes(const LayerSpec& s, const LayerWeights& w, const Request& r,
                            const std::vector<float>& x, std::int64_t tokens,
                            const std::int32_t* token_ids) {
  if (w.router_weight.empty()) return 0;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * s.top_k));
  std::vector<float> weights(ids.size());
  route_with_router(s, w, x.data(), tokens, ids.data(), weights.data(), token_ids);
  const Placement placement = placement_of(r, s.num_experts);
  std::vector<bool> used(static_cast<std::size_t>(s.num_experts), false);
  for (std::int32_t id : ids) used[static_cast<std::size_t>(id)] = true;
  const double per_expert = static_cast<double>(w.w1.bytes() + w.w2.bytes()) / s.num_experts;
  double bytes = 0;
  for (int e : placement.experts_of(r.ep_rank))
    if (used[static_cast<std::size_t>(e)]) bytes += per_expert;
  return bytes + static_cast<double>(w.shared_w1.bytes() + w.shared_w2.bytes() +
                                     w.shared_dense_w1.bytes() + w.shared_dense_w2.bytes());
}

// The input: --input's [M, H] array, else M = --tokens random rows (seeded).
std::vector<float> input_rows(const RunOptions& o, int hidden, std::int64_t& tokens) {
  if (!o.input.empty()) {
    NpyArray a = read_npy(o.input);
    if (a.shape.size() != 2 || a.shape[1] != hidden) {
      std::string shape;
      for (const auto d : a.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      throw LoadError(fmt::format(
          "--input {}: expected a float32 array of shape [M, {}] (the layer's hidden size), "
          "got [{}]",
          o.input, hidden, shape));
    }
    if (a.shape[0] < 1 || a.shape[0] > kMaxTokensPerCall)
      throw LoadError(fmt::format("--input {}: {} tokens; a call carries 1..{}", o.input,
                                  a.shape[0], kMaxTokensPerCall));
    tokens = a.shape[0];
    // A non-finite input has no defined output: refused naming the file and the tokens.
    const NonFinite bad = find_non_finite(a.data, tokens, hidden);
    if (bad.any()) throw LoadError(fmt::format("--input {}: {}", o.input, bad.describe(tokens)));
    return std::move(a.data);
  }
  tokens = o.request.tokens;
  return {};
}

// A hash layer's token ids (DeepSeek-V4's first layers; SPEC is one, WHAT names it):
// --token-ids, else random ones for random inputs; a real input without them is a usage
// error. Empty when no layer needs them and none were given.
std::vector<std::int32_t> token_ids_for(const RunOptions& o, const LayerSpec& spec,
                                        const std::string& what, std::int64_t tokens) {
  if (!o.token_ids.empty()) return read_token_ids(o.token_ids, tokens);
  if (spec.routing != RoutingMethod::hash) return {};
  if (!o.input.empty())
    throw UsageError(fmt::format(
        "{} is hash-routed (DeepSeek-V4's tid2eid: experts by token id): pass the tokens' "
        "ids with --token-ids ids.npy ([{}] int32 or int64)",
        what, tokens));
  std::mt19937_64 rng(o.seed + 2);
  std::uniform_int_distribution<std::int32_t> id(0, spec.vocab - 1);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens));
  for (std::int32_t& v : ids) v = id(rng);
  progress("mxmoe run: {} is hash-routed: random token ids in [0, {})\n", what, spec.vocab);
  return ids;
}

void fill_random(std::vector<float>& x, std::uint64_t seed, std::int64_t count) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  x.resize(static_cast<std::size_t>(count));
  for (float& v : x) v = normal(rng);
}

// Input and output of `tokens` rows of the layer, its weights (generated, or the checkpoint's
// pages read), packed copy and workspace fit in memory now. Returns the estimate.
double require_io_memory(const RunOptions& o, const LayerSpec& spec, std::int64_t tokens,
                         const MoeLayer* layer) {
  const double row_bytes = static_cast<double>(spec.hidden) * sizeof(float);
  std::vector<std::pair<std::string, double>> parts = {
      {"input", o.input.empty() ? row_bytes * static_cast<double>(tokens) : 0},
      {"output", row_bytes * static_cast<double>(tokens)}};
  if (layer != nullptr) {
    parts.emplace_back("layer weights", static_cast<double>(perf::layer_weight_bytes(spec)));
    parts.emplace_back("packed weights", static_cast<double>(layer->packed_weight_bytes()));
    parts.emplace_back("workspace", static_cast<double>(layer->workspace_bytes(tokens)));
  }
  return require_memory(fmt::format("run: {} tokens of {}", tokens, spec.name), parts);
}

// A legal input can overflow (scales near the top of E8M0): never report NaN as a result.
void require_finite(const RunOptions& o, const std::vector<float>& y, std::int64_t tokens,
                    std::int64_t hidden) {
  const NonFinite bad = find_non_finite(y, tokens, hidden);
  if (bad.any())
    throw std::runtime_error(fmt::format("run: the output holds {}{}", bad.describe(tokens),
                                         o.output.empty() ? "" : "; --output was not written"));
}

int run_expert_parallel(const RunOptions& o, CLI::App& sub, Communicator& comm);

// After a warm-up call of WARM seconds: --reps timed calls of CALL, else as many as fit in
// about 3 s (1..50); the number of calls and the median's seconds. SAY: the progress line.
struct Timing {
  int reps = 0;
  double median = 0;
};
Timing time_calls(int wanted_reps, double warm, bool say, const std::function<void()>& call) {
  using Clock = std::chrono::steady_clock;
  const int reps = wanted_reps > 0
                       ? wanted_reps
                       : std::clamp(static_cast<int>(3.0 / std::max(warm, 1e-6)), 1, 50);
  if (say && warm * reps > 2.0)
    progress("mxmoe run: timing {} calls (~{:.0f} s)...\n", reps, warm * reps);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    call();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return {reps, times[times.size() / 2]};
}

// The fields every form of `run --json` shares about the layer and the choice.
json::Json choice_json(const LayerSpec& spec, const Selection& sel, bool batch_invariant) {
  json::Json candidates = json::Json::array();
  for (const Verdict& v : sel.candidates) {
    json::Json reasons = json::Json::array();
    for (const Rejection& r : v.reasons) reasons.push_back(to_string(r.code));
    candidates.push_back({{"name", v.name}, {"supported", v.supported}, {"reasons", reasons}});
  }
  return {{"layer", spec.name},
          {"routing", to_string(spec.routing)},
          {"experts", spec.num_experts},
          {"top_k", spec.top_k},
          {"hidden", spec.hidden},
          {"intermediate", spec.intermediate},
          {"activation", to_string(*sel.deployment.request.activation)},
          {"batch_invariant", batch_invariant},
          {"chosen", sel.chosen},
          {"why", sel.why},
          {"candidates", candidates}};
}

// The fields both one-process forms of `run --json` share: tokens, threads, timing, bytes,
// output.
json::Json timing_json(std::int64_t tokens, int threads, int reps, double median, double bytes,
                       const std::string& output) {
  return {{"tokens", tokens},
          {"threads", threads},
          {"reps", reps},
          {"tokens_per_s", static_cast<double>(tokens) / median},
          {"weight_gb_per_s", bytes / median / 1e9},
          {"touched_weight_bytes", bytes},
          {"output", output.empty() ? json::Json(nullptr) : json::Json(output)}};
}

// --model DIR --layers all|0,3,5: the MoE layers of a model (mxmoe::Model, one Runtime), one
// step through all of them per timed call. Each layer reads the same input (the attention
// between them is not part of mxmoe); --output holds their outputs stacked [L, M, H].
int run_layers(const RunOptions& o, const Request& flags) {
  Runtime runtime(flags.threads);
  ModelOptions options;
  options.request = flags;
  Model model(o.layer.model, o.hardware.resolve(), runtime, options);
  std::vector<int> indices;
  if (o.layers == "all") {
    indices = model.moe_layers();
    if (indices.empty()) throw LoadError(o.layer.model + ": no MoE layer mxmoe runs");
  } else {
    try {
      indices = perf::parse_int_list(o.layers, "--layers", 0, model.num_layers() - 1);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    for (int l : indices)
      if (const std::string why = model.skip_reason(l); !why.empty())
        throw UsageError(fmt::format("--layers: layer {} is not run by mxmoe: {}", l, why));
  }
  const int hidden = model.checkpoint().layer_spec(indices.front()).hidden;
  for (int l : indices)
    if (model.checkpoint().layer_spec(l).hidden != hidden)
      throw LoadError(fmt::format("{}: layer {} has H={}, layer {} H={}", o.layer.model, l,
                                  model.checkpoint().layer_spec(l).hidden, indices.front(),
                                  hidden));
  std::int64_t tokens = 0;
  std::vector<float> x = input_rows(o, hidden, tokens);
  // The tokens' ids, when a layer of the stack is hash-routed (they share the vocabulary).
  int id_layer = indices.front();
  for (int l : indices)
    if (model.checkpoint().layer_spec(l).routing == RoutingMethod::hash) {
      id_layer = l;
      break;
    }
  const std::vector<std::int32_t> token_ids = token_ids_for(
      o, model.checkpoint().layer_spec(id_layer), fmt::format("layer {}", id_layer), tokens);
  const std::int32_t* ids = token_ids.empty() ? nullptr : token_ids.data();
  const double row_bytes = static_cast<double>(hidden) * sizeof(float);
  const auto count = static_cast<std::int64_t>(indices.size());
  require_memory(fmt::format("run: {} tokens through {} layers", tokens, count),
                 {{"input", o.input.empty() ? row_bytes * static_cast<double>(tokens) : 0},
                  {"outputs", row_bytes * static_cast<double>(tokens * count)}},
                 "use fewer tokens or layers");
  // The layers are judged for this token count (the Model's request carries the hint).
  Request request = flags;
  request.tokens_hint = static_cast<int>(tokens);
  std::vector<MoeLayer> layers;
  double workspace = 0;
  for (int l : indices) {
    layers.push_back(model.bind(l, request));
    if (o.hardware.replayed())
      require_runnable_here(layers.back().selection(), HardwareOptions::live());
    workspace += static_cast<double>(layers.back().workspace_bytes(tokens));
  }
  require_memory(
      fmt::format("run: {} tokens through {} layers", tokens, count),
      {{"outputs", row_bytes * static_cast<double>(tokens * count)}, {"workspaces", workspace}});
  if (x.empty()) fill_random(x, o.seed + 1, tokens * hidden);
  std::vector<float> y(static_cast<std::size_t>(count * tokens * hidden));
  const auto step = [&] {
    for (std::size_t i = 0; i < layers.size(); ++i)
      layers[i].forward(x.data(), ids, tokens,
                        y.data() + static_cast<std::ptrdiff_t>(i) * tokens * hidden);
  };
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  progress("mxmoe run: {} layers on {} tokens, warm-up step...\n", count, tokens);
  const auto w0 = Clock::now();
  step();
  const double warm = seconds(Clock::now() - w0);
  const NonFinite bad = find_non_finite(y, tokens * count, hidden);
  if (bad.any())
    throw std::runtime_error(fmt::format(
        "run: the stacked outputs hold {} (rows are layer x "
        "token){}",
        bad.describe(tokens * count), o.output.empty() ? "" : "; --output was not written"));
  const auto [reps, median] = time_calls(o.reps, warm, true, step);
  double bytes = 0;
  for (std::size_t i = 0; i < layers.size(); ++i)
    bytes += touched_weight_bytes(layers[i].spec(), model.checkpoint().layer_weights(indices[i]),
                                  request, x, tokens, ids);
  if (!o.output.empty()) {
    const std::int64_t shape[] = {count, tokens, hidden};
    write_npy(o.output, y, shape);  // whole or not at all (an atomic file)
  }
  std::vector<std::string> chosen;
  for (const MoeLayer& layer : layers) chosen.push_back(layer.selection().chosen);
  if (o.json) {
    json::Json out = {{"layers", indices},
                      {"chosen", chosen},
                      {"first_step_us", warm * 1e6},
                      {"us_per_step_median", median * 1e6}};
    out.update(timing_json(tokens, runtime.threads(), reps, median, bytes, o.output));
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  std::string list;
  for (std::size_t i = 0; i < indices.size(); ++i)
    list += fmt::format("{}{} ({})", i == 0 ? "" : ", ", indices[i], chosen[i]);
  fmt::print("layers: {}\n", list);
  fmt::print(
      "time: {:.1f} us per step through {} layers (median of {} after a warm-up step of "
      "{:.1f} us; {} threads)\n",
      median * 1e6, count, reps, warm * 1e6, runtime.threads());
  fmt::print(
      "throughput: {:.2f} tokens/s, {:.2f} GB/s of expert weights ({:.1f} MB touched per "
      "step)\n",
      static_cast<double>(tokens) / median, bytes / median / 1e9, bytes / 1e6);
  if (!o.output.empty())
    fmt::print("output: {} [{} x {} x {}] float32 (layer, token, hidden)\n", o.output, count,
               tokens, hidden);
  return kExitOk;
}

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
  MoeLayer layer(weights, selection, runtime);
  const double estimate = require_io_memory(o, spec, tokens, &layer);
  progress("mxmoe run: memory estimate {:.0f} bytes\n", estimate);
  if (x.empty()) fill_random(x, o.seed + 1, tokens * spec.hidden);
  std::vector<float> y(x.size());
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  progress("mxmoe run: {} on {} tokens, warm-up call...\n", selection.chosen, tokens);
  const auto w0 = Clock::now();
  layer.forward(x.data(), ids, tokens, y.data());
  const double warm = seconds(Clock::now() - w0);

  require_finite(o, y, tokens, spec.hidden);

  const auto [reps, median] =
      time_calls(o.reps, warm, true, [&] { layer.forward(x.data(), ids, tokens, y.data()); });
  const double bytes = touched_weight_bytes(spec, weights, request, x, tokens, ids);

  if (!o.output.empty()) {
    const std::int64_t shape[] = {tokens, spec.hidden};
    write_npy(o.output, y, shape);
  }

  const Selection& sel = layer.selection();
  if (o.json) {
    json::Json out = choice_json(spec, sel, request.batch_invariant);
    out["us_per_call_median"] = median * 1e6;
    out.update(timing_json(tokens, layer.threads(), reps, median, bytes, o.output));
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  fmt::print("layer: {} (E={}, top-{}, H={}, I={}{}{})\n", spec.name, spec.num_experts, spec.top_k,
             spec.hidden, spec.intermediate,
             spec.shared_experts > 0 ? fmt::format(", shared I={} {}", spec.shared_intermediate,
                                                   to_string(spec.shared_weight_format))
                                     : "",
             spec.routing == RoutingMethod::hash
                 ? fmt::format(", hash-routed by token id over {} ids", spec.vocab)
                 : "");
  fmt::print(
      "deployment: activation={}, batch_invariant={}, threads={}, tokens={} (preferences: {})\n",
      to_string(*sel.deployment.request.activation), request.batch_invariant, layer.threads(),
      tokens, sel.preferences_source);
  fmt::print("candidates:\n");
  for (const Verdict& v : sel.candidates) fmt::print("{}\n", candidate_line(sel, v));
  fmt::print("chosen: {} ({})\n", sel.chosen, sel.why);
  fmt::print("time: {:.1f} us/call (median of {} after a warm-up; {} threads)\n", median * 1e6,
             reps, layer.threads());
  fmt::print(
      "throughput: {:.1f} tokens/s, {:.2f} GB/s of expert weights ({:.1f} MB touched per call)\n",
      static_cast<double>(tokens) / median, bytes / median / 1e9, bytes / 1e6);
  if (!o.output.empty())
    fmt::print("output: {} [{} x {}] float32\n", o.output, tokens, spec.hidden);
  return kExitOk;
}

int run_expert_parallel(const RunOptions& o, CLI::App& sub, Communicator& comm) {
  const bool root = comm.rank() == 0;
  if (sub.count("--ep-rank") > 0)
    throw UsageError("--ep-rank under mpirun: each rank's is its MPI rank");
  Request request = o.request.resolve(sub);
  if (sub.count("--ep-size") > 0 && request.ep_size != comm.size())
    throw UsageError(
        fmt::format("--ep-size {} under mpirun with {} ranks: the EP size is the world size",
                    request.ep_size, comm.size()));
  if (!request.placement.empty() && request.ep_size != comm.size())
    throw UsageError(fmt::format(
        "--placement {} places experts on {} ranks; mpirun started {}: the EP size is the "
        "world size",
        o.request.placement, request.ep_size, comm.size()));
  if (root && !o.output.empty()) check_output("--output", o.output, inputs_of(o));
  request.ep_size = comm.size();
  request.ep_rank = comm.rank();

  std::optional<Checkpoint> checkpoint;
  std::optional<LayerStorage> storage;
  const LayerSpec spec = open_layer(o.layer, checkpoint);
  const Placement placement = placement_of(request, spec.num_experts);

  // Rank 0 holds the input (and the tokens' ids of a hash layer) and the output.
  std::int64_t tokens = 0;
  std::vector<float> x;
  std::vector<std::int32_t> token_ids;
  if (root) {
    if (o.input.empty()) (void)require_io_memory(o, spec, o.request.tokens, nullptr);
    x = input_rows(o, spec.hidden, tokens);
    if (x.empty()) fill_random(x, o.seed + 1, tokens * spec.hidden);
    token_ids = token_ids_for(o, spec, fmt::format("layer {}", o.layer.layer), tokens);
  }
  tokens = from_rank0(comm, static_cast<std::int64_t>(tokens));
  request.tokens_hint = static_cast<int>(tokens);

  const std::uint64_t rss_before = perf::resident_bytes();
  LayerWeights weights;
  if (checkpoint) {
    // Only this rank's experts are read: the pages of the others are never touched.
    weights = checkpoint->layer_weights(o.layer.layer, placement.runs(comm.rank()));
  } else {
    storage.emplace(LayerStorage::random(spec, o.seed));  // every rank: the same weights
    weights = storage->weights();
  }

  const Hardware hw = o.hardware.resolve();
  if (request.threads == 0) request.threads = threads_per_rank(comm, hw.logical_cpus);
  Runtime runtime(request.threads);
  ExpertParallelLayer layer =
      ExpertParallelLayer::create(spec, weights, hw, request, placement, runtime, comm);
  const Selection& sel = layer.selection();
  if (o.hardware.replayed()) require_runnable_here(sel, HardwareOptions::live());

  std::vector<float> y(x.size());
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  const std::int32_t* ids = token_ids.empty() ? nullptr : token_ids.data();
  const auto call = [&] { layer.forward(x.data(), ids, root ? tokens : 0, y.data()); };
  if (root)
    progress("mxmoe run: {} on {} tokens over {} ranks, warm-up call...\n", sel.chosen, tokens,
             comm.size());
  const auto w0 = Clock::now();
  call();
  const double warm = from_rank0(comm, seconds(Clock::now() - w0));
  if (root) require_finite(o, y, tokens, spec.hidden);
  layer.reset_times();
  const Timing timing = time_calls(o.reps, warm, root, call);  // warm is rank 0's: reps agree
  const int reps = timing.reps;
  const double median = from_rank0(comm, timing.median);

  // Every rank's figures, printed by rank 0.
  const auto all_times = gather(comm, layer.times());
  const std::uint64_t rss_after = perf::resident_bytes();
  const auto resident =
      gather(comm, static_cast<double>(rss_after - std::min(rss_after, rss_before)));
  const auto packed = gather(comm, static_cast<double>(layer.local().packed_weight_bytes()));
  if (root && !o.output.empty()) {
    const std::int64_t shape[] = {tokens, spec.hidden};
    write_npy(o.output, y, shape);
  }
  barrier(comm);  // rank 0's output is written before any rank reports success
  if (!root) return kExitOk;

  const auto per_call = [](const ExpertParallelTimes& t, double seconds_total) {
    return seconds_total / static_cast<double>(std::max<std::int64_t>(t.calls, 1)) * 1e6;
  };
  if (o.json) {
    json::Json ranks = json::Json::array();
    for (int r = 0; r < comm.size(); ++r) {
      const auto i = static_cast<std::size_t>(r);
      const ExpertParallelTimes& t = all_times[i];
      const double calls = static_cast<double>(std::max<std::int64_t>(t.calls, 1));
      ranks.push_back({{"rank", r},
                       {"experts", placement.count(r)},
                       {"resident_bytes", resident[i]},
                       {"packed_bytes", packed[i]},
                       {"route_us", per_call(t, t.route)},
                       {"dispatch_us", per_call(t, t.dispatch)},
                       {"compute_us", per_call(t, t.compute)},
                       {"return_us", per_call(t, t.returns)},
                       {"combine_us", per_call(t, t.combine)},
                       {"bytes_sent_per_call", static_cast<double>(t.bytes_sent) / calls},
                       {"bytes_received_per_call", static_cast<double>(t.bytes_received) / calls}});
    }
    json::Json out = choice_json(spec, sel, request.batch_invariant);
    out.update({
        {"tokens", tokens},
        {"ep_size", comm.size()},
        {"placement", request.placement.empty() ? "contiguous" : "from --placement"},
        {"threads_per_rank", request.threads},
        {"reps", reps},
        {"us_per_call_median", median * 1e6},
        {"tokens_per_s", static_cast<double>(tokens) / median},
        {"ranks", ranks},
        {"output", o.output.empty() ? json::Json(nullptr) : json::Json(o.output)}});
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  fmt::print("layer: {} (E={}, top-{}, H={}, I={}{})\n", spec.name, spec.num_experts, spec.top_k,
             spec.hidden, spec.intermediate,
             spec.shared_experts > 0 ? fmt::format(", shared I={}", spec.shared_intermediate) : "");
  fmt::print("expert parallel: {} ranks, placement {}\n", comm.size(),
             request.placement.empty() ? "contiguous ranges" : "from --placement");
  fmt::print(
      "deployment: activation={}, batch_invariant={}, threads per rank={}, tokens={} on rank 0 "
      "(preferences: {})\n",
      to_string(*sel.deployment.request.activation), request.batch_invariant, request.threads,
      tokens, sel.preferences_source);
  fmt::print("candidates (agreed by every rank):\n");
  for (const Verdict& v : sel.candidates) fmt::print("{}\n", candidate_line(sel, v));
  fmt::print("chosen: {} ({})\n", sel.chosen, sel.why);
  fmt::print("time: {:.1f} us/call (median of {} after a warm-up; {} ranks)\n", median * 1e6, reps,
             comm.size());
  fmt::print("throughput: {:.1f} tokens/s\n", static_cast<double>(tokens) / median);
  for (int r = 0; r < comm.size(); ++r) {
    const auto i = static_cast<std::size_t>(r);
    const ExpertParallelTimes& t = all_times[i];
    const double calls = static_cast<double>(std::max<std::int64_t>(t.calls, 1));
    fmt::print(
        "rank {}: {} experts, {:.1f} MB resident for the layer ({:.1f} MB packed); per call: "
        "route {:.0f} us, dispatch {:.0f} us, compute {:.0f} us, return {:.0f} us, combine "
        "{:.0f} us; {:.1f} kB sent, {:.1f} kB received\n",
        r, placement.count(r), resident[i] / 1e6, packed[i] / 1e6, per_call(t, t.route),
        per_call(t, t.dispatch), per_call(t, t.compute), per_call(t, t.returns),
        per_call(t, t.combine), static_cast<double>(t.bytes_sent) / calls / 1e3,
        static_cast<double>(t.bytes_received) / calls / 1e3);
  }
  if (!o.output.empty())
    fmt::print("output: {} [{} x {}] float32\n", o.output, tokens, spec.hidden);
  return kExitOk;
}


}  // namespace

void add_run(CLI::App& app, Action& action) {
  auto opts = std::make_shared<RunOptions>();
  auto* sub = app.add_subcommand(
      "run",
      "Run one MoE layer (a preset on generated random weights, or --model DIR --layer N) "
      "through the oracle's choice and time it");
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
  sub->callback([&action, opts, sub] { action = [opts, sub] { return run(*opts, *sub); }; });
}

}  // namespace mxmoe::cli
