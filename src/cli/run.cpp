// `mxmoe run`: one MoE layer through the oracle's choice. With no arguments: the gpt-oss-20b
// layer shape on deterministic random MXFP4 weights, a batch of random tokens, the
// selection (one line per candidate) and the time per call, tokens/s and weight GB/s.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/ep.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/expert_parallel.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/npy.hpp"
#include "mxmoe/routing.hpp"
#include "perf/memory.hpp"

namespace mxmoe::cli {
namespace {

struct RunOptions {
  LayerOptions layer;
  HardwareOptions hardware;
  RequestOptions request;
  EpOptions ep;
  std::uint64_t seed = 1;
  int reps = 0;  // 0: as many as fit in about 3 s (at least 1)
  std::string input, output;
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

// x [M, H]: --input, or --tokens random unit-variance rows (seeded); sets tokens.
std::vector<float> input_tokens(const RunOptions& o, const LayerSpec& spec, std::int64_t& tokens) {
  std::vector<float> x;
  tokens = o.request.tokens;
  if (!o.input.empty()) {
    NpyArray a = read_npy(o.input);
    if (a.shape.size() != 2 || a.shape[1] != spec.hidden)
      throw std::invalid_argument(
          fmt::format("--input {}: expected shape [M, {}]", o.input, spec.hidden));
    tokens = a.shape[0];
    x = std::move(a.data);
  } else {
    std::mt19937_64 rng(o.seed + 1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    x.resize(static_cast<std::size_t>(tokens * spec.hidden));
    for (float& v : x) v = normal(rng);
  }
  if (tokens <= 0) throw std::invalid_argument("no tokens to run");
  return x;
}

// Bytes of the expert weights one call reads: every distinct local expert the routing
// touches, plus the shared expert.
double touched_weight_bytes(const LayerSpec& s, const LayerWeights& w, const Request& r,
                            const std::vector<float>& x, std::int64_t tokens) {
  if (w.router_weight.empty()) return 0;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * s.top_k));
  std::vector<float> weights(ids.size());
  route_with_router(s, w, x.data(), tokens, ids.data(), weights.data());
  const Placement placement = placement_of(r, s.num_experts);
  std::vector<bool> used(static_cast<std::size_t>(s.num_experts), false);
  for (std::int32_t id : ids) used[static_cast<std::size_t>(id)] = true;
  const double per_expert = static_cast<double>(w.w1.bytes() + w.w2.bytes()) / s.num_experts;
  double bytes = 0;
  for (int e : placement.experts_of(r.ep_rank))
    if (used[static_cast<std::size_t>(e)]) bytes += per_expert;
  // Each rank runs the shared expert of its own tokens.
  return bytes + static_cast<double>(w.shared_w1.bytes() + w.shared_w2.bytes());
}

int run_expert_parallel(const RunOptions& o, CLI::App& sub, Communicator& comm);

int run(const RunOptions& o, CLI::App& sub) {
  if (const auto world = ep_world(o.ep.resolve(sub))) return run_expert_parallel(o, sub, *world);
  const bool from_model = o.layer.from_model();
  const Printer say{from_model ? stderr : stdout};
  const Printer progress{stderr};

  LayerSpec spec;
  std::optional<Checkpoint> checkpoint;
  std::optional<LayerStorage> storage;
  LayerWeights weights;
  if (from_model) {
    checkpoint.emplace(Checkpoint::open(o.layer.model));
    spec = checkpoint->layer_spec(o.layer.layer);
    weights = checkpoint->layer_weights(o.layer.layer);
  } else {
    spec = o.layer.spec();
    const double gb =
        3.0 * spec.num_experts * spec.hidden * double{1} * spec.intermediate * 17 / 32 / 1e9;
    progress("mxmoe run: generating random MXFP4 weights for {} ({:.2f} GB, seed {})\n", spec.name,
             gb, o.seed);
    storage.emplace(LayerStorage::random(spec, o.seed));
    weights = storage->weights();
  }

  std::int64_t tokens = 0;
  const std::vector<float> x = input_tokens(o, spec, tokens);

  Request request = o.request.resolve(sub);
  request.tokens_hint = static_cast<int>(tokens);
  const Deployment deployment{spec, o.hardware.resolve(), request};
  Selection selection = select(deployment, preferences_for(spec.family));
  say("layer: {} (E={}, top-{}, H={}, I={}{})\n", spec.name, spec.num_experts, spec.top_k,
      spec.hidden, spec.intermediate,
      spec.shared_experts > 0 ? fmt::format(", shared I={}", spec.shared_intermediate) : "");
  say("deployment: activation={}, batch_invariant={}, threads={}, tokens={} (preferences: {})\n",
      to_string(*selection.deployment.request.activation), request.batch_invariant,
      request.threads > 0 ? request.threads : selection.deployment.hardware.logical_cpus, tokens,
      selection.preferences_source);
  say("candidates:\n");
  for (const Verdict& v : selection.candidates) say("{}\n", candidate_line(selection, v));
  say("chosen: {} ({})\n", selection.chosen, selection.why);

  Runtime runtime(request.threads);
  MoeLayer layer(weights, std::move(selection), runtime);
  std::vector<float> y(x.size());
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  progress("mxmoe run: warm-up call...\n");
  const auto w0 = Clock::now();
  layer.forward(x.data(), tokens, y.data());
  const double warm = seconds(Clock::now() - w0);
  const int reps =
      o.reps > 0 ? o.reps : std::clamp(static_cast<int>(3.0 / std::max(warm, 1e-6)), 1, 50);
  if (warm * reps > 2.0) progress("mxmoe run: timing {} calls (~{:.0f} s)...\n", reps, warm * reps);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    layer.forward(x.data(), tokens, y.data());
    times.push_back(seconds(Clock::now() - t0));
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  const double bytes = touched_weight_bytes(spec, weights, request, x, tokens);
  say("time: {:.1f} us/call (median of {} after a warm-up; {} threads)\n", median * 1e6, reps,
      layer.threads());
  say("throughput: {:.1f} tokens/s, {:.2f} GB/s of expert weights ({:.1f} MB touched per call)\n",
      static_cast<double>(tokens) / median, bytes / median / 1e9, bytes / 1e6);

  if (!o.output.empty()) {
    const std::int64_t shape[] = {tokens, spec.hidden};
    write_npy(o.output, y, shape);
    say("output: {} [{} x {}] float32\n", o.output, tokens, spec.hidden);
  }
  return kExitOk;
}

// `mpirun -n N mxmoe run ...`: the layer's experts over the N ranks (EP size = world size).
// Rank 0 reads the input, prints and writes the output; every rank holds, reads and packs
// only its experts. The output has the bytes of a one-process run on the same hardware.
int run_expert_parallel(const RunOptions& o, CLI::App& sub, Communicator& comm) {
  const bool root = comm.rank() == 0;
  const Printer say{root ? (o.layer.from_model() ? stderr : stdout) : nullptr};
  const auto print = [&](const std::string& text) {
    if (say.to != nullptr) say("{}", text);
  };

  std::optional<Checkpoint> checkpoint;
  std::optional<LayerStorage> storage;
  const LayerSpec spec = open_layer(o.layer, checkpoint);

  Request request = o.request.resolve(sub);
  if (sub.count("--ep-size") > 0 && request.ep_size != comm.size())
    throw std::invalid_argument(
        fmt::format("--ep-size {} under mpirun with {} ranks: the EP size is the world size",
                    request.ep_size, comm.size()));
  request.ep_size = comm.size();
  request.ep_rank = comm.rank();
  const Placement placement = placement_of(request, spec.num_experts);

  const std::uint64_t rss_before = perf::resident_bytes();
  LayerWeights weights;
  if (checkpoint) {
    // Only this rank's experts are read: the pages of the others are never touched.
    weights = checkpoint->layer_weights(o.layer.layer, placement.runs(comm.rank()));
  } else {
    storage.emplace(LayerStorage::random(spec, o.seed));  // every rank: the same weights
    weights = storage->weights();
  }

  std::int64_t tokens = 0;
  std::vector<float> x;
  if (root) x = input_tokens(o, spec, tokens);
  tokens = from_rank0(comm, tokens);
  request.tokens_hint = static_cast<int>(tokens);

  const Hardware hw = o.hardware.resolve();
  if (request.threads == 0) request.threads = threads_per_rank(comm, hw.logical_cpus);
  Runtime runtime(request.threads);
  ExpertParallelLayer layer =
      ExpertParallelLayer::create(spec, weights, hw, request, placement, runtime, comm);
  const Selection& selection = layer.selection();
  log_dispatch(selection);
  print(fmt::format(
      "layer: {} (E={}, top-{}, H={}, I={}{})\n", spec.name, spec.num_experts, spec.top_k,
      spec.hidden, spec.intermediate,
      spec.shared_experts > 0 ? fmt::format(", shared I={}", spec.shared_intermediate) : ""));
  print(fmt::format("expert parallel: {} ranks, placement {}\n", comm.size(),
                    request.placement.empty() ? "contiguous ranges" : "from --placement"));
  print(fmt::format(
      "deployment: activation={}, batch_invariant={}, threads per rank={}, tokens={} on rank 0 "
      "(preferences: {})\n",
      to_string(*selection.deployment.request.activation), request.batch_invariant, request.threads,
      tokens, selection.preferences_source));
  print("candidates (agreed by every rank):\n");
  for (const Verdict& v : selection.candidates) print(candidate_line(selection, v) + "\n");
  print(fmt::format("chosen: {} ({})\n", selection.chosen, selection.why));

  std::vector<float> y(x.size());
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  const auto call = [&] { layer.forward(x.data(), root ? tokens : 0, y.data()); };
  const auto w0 = Clock::now();
  call();
  const double warm = from_rank0(comm, seconds(Clock::now() - w0));
  const int reps =
      o.reps > 0 ? o.reps : std::clamp(static_cast<int>(3.0 / std::max(warm, 1e-6)), 1, 50);
  layer.reset_times();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    call();
    times.push_back(seconds(Clock::now() - t0));
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];

  // Every rank's figures, printed by rank 0.
  const auto all_times = gather(comm, layer.times());
  const auto resident = gather(
      comm,
      static_cast<double>(perf::resident_bytes() - std::min(perf::resident_bytes(), rss_before)));
  const auto packed = gather(comm, static_cast<double>(layer.local().packed_weight_bytes()));
  print(fmt::format("time: {:.1f} us/call (median of {} after a warm-up; {} ranks)\n", median * 1e6,
                    reps, comm.size()));
  print(fmt::format("throughput: {:.1f} tokens/s\n", static_cast<double>(tokens) / median));
  for (int r = 0; r < comm.size(); ++r) {
    const ExpertParallelTimes& t = all_times[static_cast<std::size_t>(r)];
    const double n = static_cast<double>(std::max<std::int64_t>(t.calls, 1));
    print(fmt::format(
        "rank {}: {} experts, {:.1f} MB resident for the layer ({:.1f} MB packed); per call: "
        "route {:.0f} us, dispatch {:.0f} us, compute {:.0f} us, return {:.0f} us, combine "
        "{:.0f} us; {:.1f} kB sent, {:.1f} kB received\n",
        r, placement.count(r), resident[static_cast<std::size_t>(r)] / 1e6,
        packed[static_cast<std::size_t>(r)] / 1e6, t.route / n * 1e6, t.dispatch / n * 1e6,
        t.compute / n * 1e6, t.returns / n * 1e6, t.combine / n * 1e6,
        static_cast<double>(t.bytes_sent) / n / 1e3,
        static_cast<double>(t.bytes_received) / n / 1e3));
  }
  if (root && !o.output.empty()) {
    const std::int64_t shape[] = {tokens, spec.hidden};
    write_npy(o.output, y, shape);
    print(fmt::format("output: {} [{} x {}] float32\n", o.output, tokens, spec.hidden));
  }
  barrier(comm);  // rank 0's output is written before any rank reports success
  return kExitOk;
}

}  // namespace

void add_run(CLI::App& app, Action& action) {
  auto opts = std::make_shared<RunOptions>();
  auto* sub = app.add_subcommand(
      "run",
      "Run one MoE layer (a preset on embedded random weights, or --model DIR --layer N) "
      "through the oracle's choice and time it");
  opts->request.tokens = 16;
  opts->layer.add(*sub);
  opts->hardware.add(*sub);
  opts->request.add(*sub);
  opts->ep.add(*sub);
  sub->add_option("--seed", opts->seed, "Seed of the random weights and tokens");
  sub->add_option("--reps", opts->reps, "Timed calls after the warm-up (default: ~3 s worth)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--input", opts->input, "Input tokens x [M, H] as a float32 .npy file")
      ->check(CLI::ExistingFile);
  sub->add_option("--output", opts->output, "Write the output y [M, H] as a float32 .npy file");
  sub->callback([&action, opts, sub] { action = [opts, sub] { return run(*opts, *sub); }; });
}

}  // namespace mxmoe::cli
