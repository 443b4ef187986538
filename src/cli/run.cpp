// `mxmoe run`: one MoE layer through the oracle's choice. With no arguments: the gpt-oss-20b
// layer shape on deterministic random MXFP4 weights, a batch of random tokens, the
// selection (one line per candidate) and the time per call, tokens/s and weight GB/s.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/file.hpp"
#include "base/json.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/npy.hpp"
#include "mxmoe/routing.hpp"

namespace mxmoe::cli {
namespace {

struct RunOptions {
  LayerOptions layer;
  HardwareOptions hardware;
  RequestOptions request;
  std::uint64_t seed = 1;
  int reps = 0;  // 0: as many as fit in about 3 s (at least 1)
  std::string input, output, token_ids;
  bool json = false;
};

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

// Bytes of the expert weights one call reads: every distinct local expert the routing
// touches, plus the shared expert.
double touched_weight_bytes(const LayerSpec& s, const LayerWeights& w, const Request& r,
                            const std::vector<float>& x, std::int64_t tokens,
                            const std::int32_t* token_ids) {
  if (w.router_weight.empty()) return 0;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * s.top_k));
  std::vector<float> weights(ids.size());
  route_with_router(s, w, x.data(), tokens, ids.data(), weights.data(), token_ids);
  const ExpertRange local =
      contiguous_expert_range(s.num_experts, std::max(r.ep_size, 1), r.ep_rank);
  std::vector<bool> used(static_cast<std::size_t>(s.num_experts), false);
  for (std::int32_t id : ids) used[static_cast<std::size_t>(id)] = true;
  const double per_expert = static_cast<double>(w.w1.bytes() + w.w2.bytes()) / s.num_experts;
  double bytes = 0;
  for (int e = local.begin; e < local.end; ++e)
    if (used[static_cast<std::size_t>(e)]) bytes += per_expert;
  if (r.ep_rank == 0)
    bytes += static_cast<double>(w.shared_w1.bytes() + w.shared_w2.bytes() +
                                 w.shared_dense_w1.bytes() + w.shared_dense_w2.bytes());
  return bytes;
}

// A hash layer's token ids: --token-ids, else random ones for random inputs; a real input
// without them is a usage error. Empty for the other layers.
std::vector<std::int32_t> token_ids_for(const RunOptions& o, const LayerSpec& spec, int index,
                                        std::int64_t tokens) {
  if (!o.token_ids.empty()) return read_token_ids(o.token_ids, tokens);
  if (spec.routing != RoutingMethod::hash) return {};
  if (!o.input.empty())
    throw UsageError(fmt::format(
        "layer {} is hash-routed (DeepSeek-V4's tid2eid: experts by token id): pass the tokens' "
        "ids with --token-ids ids.npy ([{}] int32 or int64)",
        index, tokens));
  std::mt19937_64 rng(o.seed + 2);
  std::uniform_int_distribution<std::int32_t> id(0, spec.vocab - 1);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens));
  for (std::int32_t& v : ids) v = id(rng);
  progress("mxmoe run: layer {} is hash-routed: random token ids in [0, {})\n", index, spec.vocab);
  return ids;
}

// One layer (INDEX of CHECKPOINT, or the preset when null): select, build, warm up, time,
// report; y written to --output when asked.
int run_layer(const RunOptions& o, const Request& flags, const Checkpoint* checkpoint, int index) {
  LayerSpec spec;
  std::optional<LayerStorage> storage;
  LayerWeights weights;
  if (checkpoint != nullptr) {
    spec = checkpoint->layer_spec(index);
  } else {
    spec = o.layer.spec();
  }
  // The input and output alone must fit before any weight is generated or read (the layer's
  // workspace is added once the chosen backend is known, below).
  const double row_bytes = static_cast<double>(spec.hidden) * sizeof(float);
  if (o.input.empty())
    require_memory(
        fmt::format("run: {} tokens of {}", o.request.tokens, spec.name),
        {{"input", row_bytes * o.request.tokens}, {"output", row_bytes * o.request.tokens}});
  if (checkpoint != nullptr) {
    weights = checkpoint->layer_weights(index);
  } else {
    progress(
        "mxmoe run: generating random MXFP4 weights for {} ({}, seed {})\n", spec.name,
        bytes_text(3.0 * spec.num_experts * spec.hidden * double{1} * spec.intermediate * 17 / 32),
        o.seed);
    storage.emplace(LayerStorage::random(spec, o.seed));
    weights = storage->weights();
  }

  std::vector<float> x;
  std::int64_t tokens = o.request.tokens;
  if (!o.input.empty()) {
    NpyArray a = read_npy(o.input);
    if (a.shape.size() != 2 || a.shape[1] != spec.hidden)
      throw LoadError(
          fmt::format("--input {}: expected a float32 array of shape [M, {}] (the "
                      "layer's hidden size), got {} dimensions",
                      o.input, spec.hidden, a.shape.size()));
    if (a.shape[0] < 1 || a.shape[0] > kMaxTokensPerCall)
      throw LoadError(fmt::format("--input {}: {} tokens; a call carries 1..{}", o.input,
                                  a.shape[0], kMaxTokensPerCall));
    tokens = a.shape[0];
    x = std::move(a.data);
  }

  const std::vector<std::int32_t> token_ids = token_ids_for(o, spec, index, tokens);
  const std::int32_t* ids = token_ids.empty() ? nullptr : token_ids.data();

  Request request = flags;
  request.tokens_hint = static_cast<int>(tokens);
  const Deployment deployment{spec, o.hardware.resolve(), request};
  Selection selection = select(deployment, preferences_for(spec.family));
  if (o.hardware.replayed()) require_runnable_here(selection, HardwareOptions::live());

  Runtime runtime(request.threads);
  MoeLayer layer(weights, selection, runtime);
  require_memory(fmt::format("run: {} tokens of {}", tokens, spec.name),
                 {{"input", o.input.empty() ? row_bytes * static_cast<double>(tokens) : 0},
                  {"output", row_bytes * static_cast<double>(tokens)},
                  {"workspace", static_cast<double>(layer.workspace_bytes(tokens))}});
  if (x.empty()) {
    std::mt19937_64 rng(o.seed + 1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    x.resize(static_cast<std::size_t>(tokens * spec.hidden));
    for (float& v : x) v = normal(rng);
  }
  std::vector<float> y(x.size());
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  progress("mxmoe run: {} on {} tokens, warm-up call...\n", selection.chosen, tokens);
  const auto w0 = Clock::now();
  layer.forward(x.data(), ids, tokens, y.data());
  const double warm = seconds(Clock::now() - w0);

  // A legal input can overflow (scales near the top of E8M0): never report NaN as a result.
  const NonFinite bad = find_non_finite(y, tokens, spec.hidden);
  if (bad.any())
    throw std::runtime_error(fmt::format("run: the output holds {}{}", bad.describe(tokens),
                                         o.output.empty() ? "" : "; --output was not written"));

  const int reps =
      o.reps > 0 ? o.reps : std::clamp(static_cast<int>(3.0 / std::max(warm, 1e-6)), 1, 50);
  if (warm * reps > 2.0) progress("mxmoe run: timing {} calls (~{:.0f} s)...\n", reps, warm * reps);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    layer.forward(x.data(), ids, tokens, y.data());
    times.push_back(seconds(Clock::now() - t0));
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  const double bytes = touched_weight_bytes(spec, weights, request, x, tokens, ids);

  if (!o.output.empty()) {
    const std::int64_t shape[] = {tokens, spec.hidden};
    write_npy(o.output, y, shape);
  }

  const Selection& sel = layer.selection();
  if (o.json) {
    json::Json candidates = json::Json::array();
    for (const Verdict& v : sel.candidates) {
      json::Json reasons = json::Json::array();
      for (const Rejection& r : v.reasons) reasons.push_back(to_string(r.code));
      candidates.push_back({{"name", v.name}, {"supported", v.supported}, {"reasons", reasons}});
    }
    const json::Json out = {
        {"layer", spec.name},
        {"index", index},
        {"routing", to_string(spec.routing)},
        {"experts", spec.num_experts},
        {"top_k", spec.top_k},
        {"hidden", spec.hidden},
        {"intermediate", spec.intermediate},
        {"activation", to_string(*sel.deployment.request.activation)},
        {"batch_invariant", request.batch_invariant},
        {"chosen", sel.chosen},
        {"why", sel.why},
        {"candidates", candidates},
        {"tokens", tokens},
        {"threads", layer.threads()},
        {"reps", reps},
        {"us_per_call_median", median * 1e6},
        {"tokens_per_s", static_cast<double>(tokens) / median},
        {"weight_gb_per_s", bytes / median / 1e9},
        {"touched_weight_bytes", bytes},
        {"output", o.output.empty() ? json::Json(nullptr) : json::Json(o.output)}};
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  if (checkpoint != nullptr) fmt::print("== layer {} ==\n", index);
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

int run(const RunOptions& o, CLI::App& sub) {
  // Everything that can be refused cheaply is refused before loading or computing anything:
  // the flags, the environment, and whether --output can be written at all.
  const Request flags = o.request.resolve(sub);
  const std::vector<int> layers = o.layer.selected_layers();
  if (layers.size() > 1 && (!o.output.empty() || o.json))
    throw UsageError("--output and --json report one layer: give one --layer with them");
  if (!o.output.empty()) files::check_can_create(o.output);
  std::optional<Checkpoint> checkpoint;
  if (o.layer.from_model()) {
    checkpoint.emplace(Checkpoint::open(o.layer.model));
    for (const int index : layers) (void)checkpoint->layer_spec(index);  // all, before any runs
  }
  for (const int index : layers) {
    const int rc = run_layer(o, flags, checkpoint ? &*checkpoint : nullptr, index);
    if (rc != kExitOk) return rc;
  }
  return kExitOk;
}

}  // namespace

void add_run(CLI::App& app, Action& action) {
  auto opts = std::make_shared<RunOptions>();
  auto* sub = app.add_subcommand(
      "run",
      "Run MoE layers (a preset on generated random weights, or --model DIR --layer N[,M...]) "
      "through the oracle's choice and time it");
  opts->request.tokens = 16;
  opts->layer.add(*sub, /*several_layers=*/true);
  opts->hardware.add(*sub);
  opts->request.add(*sub);
  sub->add_option("--seed", opts->seed, "Seed of the random weights and tokens");
  sub->add_option(
         "--reps", opts->reps,
         fmt::format("Timed calls after the warm-up, 1..{} (default: ~3 s worth)", kMaxReps))
      ->check(CLI::Range(1, kMaxReps));
  sub->add_option("--input", opts->input, "Input tokens x [M, H] as a float32 .npy file")
      ->check(CLI::ExistingFile);
  sub->add_option("--output", opts->output,
                  "Write the output y [M, H] as a float32 .npy file (whole or not at all; "
                  "checked writable before any work)");
  sub->add_option("--token-ids", opts->token_ids,
                  "The tokens' ids [M] (.npy int32 or int64): what a hash-routed layer "
                  "(DeepSeek-V4's first layers) routes by; ignored by other layers")
      ->check(CLI::ExistingFile);
  sub->add_flag("--json", opts->json, "Print the result as one JSON document");
  sub->callback([&action, opts, sub] { action = [opts, sub] { return run(*opts, *sub); }; });
}

}  // namespace mxmoe::cli
