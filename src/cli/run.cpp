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
};

// Prints to stdout, or to stderr when stdout is reserved for data (--model runs).
struct Printer {
  std::FILE* to;
  template <class... Args>
  void operator()(fmt::format_string<Args...> f, Args&&... args) const {
    fmt::print(to, f, std::forward<Args>(args)...);
    std::fflush(to);
  }
};

std::string candidate_line(const Selection& s, const Verdict& v) {
  const std::string mark = v.name == s.chosen ? "*" : " ";
  if (v.supported)
    return fmt::format("{} {:<12} supported  ~{:.0f} us/call (estimate)", mark, v.name,
                       v.estimated_us);
  const Rejection& r = v.reasons.front();
  return fmt::format("{} {:<12} rejected   {}: {}{}", mark, v.name, to_string(r.code), r.detail,
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

// One layer: select, build, warm up, time, report; y written to --output when asked.
void run_layer(const RunOptions& o, CLI::App& sub, const LayerSpec& spec,
               const LayerWeights& weights, const std::vector<float>& x, std::int64_t tokens,
               const std::vector<std::int32_t>& token_ids, const Printer& say) {
  const Printer progress{stderr};
  Request request = o.request.resolve(sub);
  request.tokens_hint = static_cast<int>(tokens);
  const Deployment deployment{spec, o.hardware.resolve(), request};
  Selection selection = select(deployment, preferences_for(spec.family));
  log_dispatch(selection);
  say("layer: {} (E={}, top-{}, H={}, I={}{}{})\n", spec.name, spec.num_experts, spec.top_k,
      spec.hidden, spec.intermediate,
      spec.shared_experts > 0 ? fmt::format(", shared I={} {}", spec.shared_intermediate,
                                            to_string(spec.shared_weight_format))
                              : "",
      spec.routing == RoutingMethod::hash
          ? fmt::format(", hash-routed by token id over {} ids", spec.vocab)
          : "");
  say("deployment: activation={}, batch_invariant={}, threads={}, tokens={} (preferences: {})\n",
      to_string(*selection.deployment.request.activation), request.batch_invariant,
      request.threads > 0 ? request.threads : selection.deployment.hardware.logical_cpus, tokens,
      selection.preferences_source);
  say("candidates:\n");
  for (const Verdict& v : selection.candidates) say("{}\n", candidate_line(selection, v));
  say("chosen: {} ({})\n", selection.chosen, selection.why);

  Runtime runtime(request.threads);
  MoeLayer layer(weights, std::move(selection), runtime);
  const std::int32_t* ids = token_ids.empty() ? nullptr : token_ids.data();
  std::vector<float> y(x.size());
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  progress("mxmoe run: warm-up call...\n");
  const auto w0 = Clock::now();
  layer.forward(x.data(), ids, tokens, y.data());
  const double warm = seconds(Clock::now() - w0);
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
  say("time: {:.1f} us/call (median of {} after a warm-up; {} threads)\n", median * 1e6, reps,
      layer.threads());
  say("throughput: {:.1f} tokens/s, {:.2f} GB/s of expert weights ({:.1f} MB touched per call)\n",
      static_cast<double>(tokens) / median, bytes / median / 1e9, bytes / 1e6);

  if (!o.output.empty()) {
    const std::int64_t shape[] = {tokens, spec.hidden};
    write_npy(o.output, y, shape);
    say("output: {} [{} x {}] float32\n", o.output, tokens, spec.hidden);
  }
}

int run(const RunOptions& o, CLI::App& sub) {
  const bool from_model = o.layer.from_model();
  const Printer say{from_model ? stderr : stdout};
  const Printer progress{stderr};
  if (from_model && o.layer.layers.size() > 1 && !o.output.empty())
    throw std::invalid_argument("--output writes one layer's output: give one --layer with it");
  if (!from_model && o.layer.layers != std::vector<int>{0})
    throw std::invalid_argument("--layer needs --model");

  std::optional<Checkpoint> checkpoint;
  if (from_model) checkpoint.emplace(Checkpoint::open(o.layer.model));
  const std::vector<int> layers = from_model ? o.layer.layers : std::vector<int>{0};
  std::optional<NpyArray> input;
  if (!o.input.empty()) input.emplace(read_npy(o.input));

  for (const int index : layers) {
    const LoadedLayer loaded =
        load_layer(o.layer, checkpoint ? &*checkpoint : nullptr, index, o.seed, "run");
    const LayerSpec& spec = loaded.spec;
    const LayerWeights& weights = loaded.weights;

    std::vector<float> x;
    std::int64_t tokens = o.request.tokens;
    if (input) {
      if (input->shape.size() != 2 || input->shape[1] != spec.hidden)
        throw std::invalid_argument(
            fmt::format("--input {}: expected shape [M, {}]", o.input, spec.hidden));
      tokens = input->shape[0];
      x = input->data;
    } else {
      std::mt19937_64 rng(o.seed + 1);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      x.resize(static_cast<std::size_t>(tokens * spec.hidden));
      for (float& v : x) v = normal(rng);
    }
    if (tokens <= 0) throw std::invalid_argument("no tokens to run");

    // A hash layer routes by token id: given with --token-ids, random ones for random inputs,
    // and a usage error for a real input without them.
    std::vector<std::int32_t> token_ids;
    if (!o.token_ids.empty()) {
      token_ids = read_token_ids(o.token_ids, tokens);
    } else if (spec.routing == RoutingMethod::hash && input) {
      throw std::invalid_argument(fmt::format(
          "layer {} is hash-routed (DeepSeek-V4 tid2eid: experts by token id): pass the tokens' "
          "ids with --token-ids ids.npy ([{}] int32 or int64)",
          index, tokens));
    } else if (spec.routing == RoutingMethod::hash) {
      std::mt19937_64 rng(o.seed + 2);
      std::uniform_int_distribution<std::int32_t> id(0, spec.vocab - 1);
      token_ids.resize(static_cast<std::size_t>(tokens));
      for (std::int32_t& v : token_ids) v = id(rng);
      progress("mxmoe run: layer {} is hash-routed: random token ids in [0, {})\n", index,
               spec.vocab);
    }
    if (from_model) say("== layer {} ==\n", index);
    run_layer(o, sub, spec, weights, x, tokens, token_ids, say);
  }
  return kExitOk;
}

}  // namespace

void add_run(CLI::App& app, Action& action) {
  auto opts = std::make_shared<RunOptions>();
  auto* sub = app.add_subcommand(
      "run",
      "Run MoE layers (a preset on embedded random weights, or --model DIR --layer N[,M...]) "
      "through the oracle's choice and time it");
  opts->request.tokens = 16;
  opts->layer.add(*sub, /*several_layers=*/true);
  opts->hardware.add(*sub);
  opts->request.add(*sub);
  sub->add_option("--seed", opts->seed, "Seed of the random weights and tokens");
  sub->add_option("--reps", opts->reps, "Timed calls after the warm-up (default: ~3 s worth)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--input", opts->input, "Input tokens x [M, H] as a float32 .npy file")
      ->check(CLI::ExistingFile);
  sub->add_option("--output", opts->output, "Write the output y [M, H] as a float32 .npy file");
  sub->add_option("--token-ids", opts->token_ids,
                  "The tokens' ids [M] (.npy int32 or int64): what a hash-routed layer "
                  "(DeepSeek-V4's first layers) routes by; ignored by other layers")
      ->check(CLI::ExistingFile);
  sub->callback([&action, opts, sub] { action = [opts, sub] { return run(*opts, *sub); }; });
}

}  // namespace mxmoe::cli
