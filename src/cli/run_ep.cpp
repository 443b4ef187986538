// `mpirun -n N mxmoe run ...`: one layer over the ranks of an expert-parallel group, each
// rank's figures printed by rank 0.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "cli/run_common.hpp"
#include "io/npy.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/expert_parallel.hpp"
#include "perf/memory.hpp"

namespace mxmoe::cli::run_detail {

namespace {

// The request of this rank: under mpirun the EP size is the world size and the EP rank the MPI
// rank (--ep-rank, or an --ep-size or --placement for another size, is a usage error).
Request ep_request(const RunOptions& o, CLI::App& sub, Communicator& comm) {
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
  if (comm.rank() == 0 && !o.output.empty()) check_output("--output", o.output, inputs_of(o));
  request.ep_size = comm.size();
  request.ep_rank = comm.rank();
  return request;
}

// Rank 0 holds the input (and the tokens' ids of a hash layer) and the output; every rank
// learns the number of tokens.
struct RootInput {
  std::int64_t tokens = 0;
  std::vector<float> x;
  std::vector<std::int32_t> token_ids;
};

RootInput read_input_on_root(const RunOptions& o, const LayerSpec& spec, Communicator& comm) {
  RootInput in;
  if (comm.rank() == 0) {
    if (o.input.empty()) (void)require_io_memory(o, spec, o.request.tokens, nullptr);
    in.x = input_rows(o, spec.hidden, in.tokens);
    if (in.x.empty()) fill_random(in.x, o.seed + 1, in.tokens * spec.hidden);
    in.token_ids = token_ids_for(o, spec, fmt::format("layer {}", o.layer.layer), in.tokens);
  }
  in.tokens = from_rank0(comm, static_cast<std::int64_t>(in.tokens));
  return in;
}

// This rank's weights: of a checkpoint only this rank's experts are read (the pages of the
// others are never touched); generated ones are the same on every rank (held by storage).
LayerWeights weights_of_rank(const RunOptions& o, const LayerSpec& spec,
                             const std::optional<Checkpoint>& checkpoint,
                             const Placement& placement, Communicator& comm,
                             std::optional<LayerStorage>& storage) {
  if (checkpoint) return checkpoint->layer_weights(o.layer.layer, placement.runs(comm.rank()));
  storage.emplace(LayerStorage::random(spec, o.seed));
  return storage->weights();
}

// A warm-up call, then the timed calls (as many on every rank: the warm-up's seconds are rank
// 0's); the median is rank 0's. Rank 0's output must be finite.
Timing time_layer(const RunOptions& o, ExpertParallelLayer& layer, const LayerSpec& spec,
                  const RootInput& in, std::vector<float>& y, Communicator& comm) {
  const bool root = comm.rank() == 0;
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  const std::int32_t* ids = in.token_ids.empty() ? nullptr : in.token_ids.data();
  const auto call = [&] { layer.forward(in.x.data(), ids, root ? in.tokens : 0, y.data()); };
  if (root)
    progress("mxmoe run: {} on {} tokens over {} ranks, warm-up call...\n",
             layer.selection().chosen, in.tokens, comm.size());
  const auto w0 = Clock::now();
  call();
  const double warm = from_rank0(comm, seconds(Clock::now() - w0));
  if (root) require_finite(o, y, in.tokens, spec.hidden);
  layer.reset_times();
  Timing timing = time_calls(o.reps, warm, root, call);  // warm is rank 0's: reps agree
  timing.median = from_rank0(comm, timing.median);
  return timing;
}

// Every rank's figures, gathered on every rank.
struct RankFigures {
  std::vector<ExpertParallelTimes> times;
  std::vector<double> resident;  // bytes the layer added to each rank
  std::vector<double> packed;    // each rank's packed weight bytes
};

RankFigures gather_figures(const ExpertParallelLayer& layer, std::uint64_t rss_before,
                           Communicator& comm) {
  RankFigures f;
  f.times = gather(comm, layer.times());
  const std::uint64_t rss_after = perf::resident_bytes();
  f.resident = gather(comm, static_cast<double>(rss_after - std::min(rss_after, rss_before)));
  f.packed = gather(comm, static_cast<double>(layer.local().packed_weight_bytes()));
  return f;
}

double us_per_call(const ExpertParallelTimes& t, double seconds_total) {
  return seconds_total / static_cast<double>(std::max<std::int64_t>(t.calls, 1)) * 1e6;
}

// What rank 0 prints: the layer, the deployment, the timing and every rank's figures.
struct EpReport {
  const RunOptions& o;
  const LayerSpec& spec;
  const Selection& sel;
  const Request& request;
  const Placement& placement;
  std::int64_t tokens;
  int ranks;
  Timing timing;
  const RankFigures& figures;
};

void print_json(const EpReport& r) {
  json::Json ranks = json::Json::array();
  for (int rank = 0; rank < r.ranks; ++rank) {
    const auto i = static_cast<std::size_t>(rank);
    const ExpertParallelTimes& t = r.figures.times[i];
    const double calls = static_cast<double>(std::max<std::int64_t>(t.calls, 1));
    ranks.push_back({{"rank", rank},
                     {"experts", r.placement.count(rank)},
                     {"resident_bytes", r.figures.resident[i]},
                     {"packed_bytes", r.figures.packed[i]},
                     {"route_us", us_per_call(t, t.route)},
                     {"dispatch_us", us_per_call(t, t.dispatch)},
                     {"compute_us", us_per_call(t, t.compute)},
                     {"return_us", us_per_call(t, t.returns)},
                     {"combine_us", us_per_call(t, t.combine)},
                     {"bytes_sent_per_call", static_cast<double>(t.bytes_sent) / calls},
                     {"bytes_received_per_call", static_cast<double>(t.bytes_received) / calls}});
  }
  const double median = r.timing.median;
  json::Json out = choice_json(r.spec, r.sel, r.request.batch_invariant);
  out.update({{"tokens", r.tokens},
              {"ep_size", r.ranks},
              {"placement", r.request.placement.empty() ? "contiguous" : "from --placement"},
              {"threads_per_rank", r.request.threads},
              {"reps", r.timing.reps},
              {"us_per_call_median", median * 1e6},
              {"tokens_per_s", static_cast<double>(r.tokens) / median},
              {"ranks", ranks},
              {"output", r.o.output.empty() ? json::Json(nullptr) : json::Json(r.o.output)}});
  cli::print("{}\n", out.dump(2));
}

void print_text(const EpReport& r) {
  const LayerSpec& spec = r.spec;
  const Selection& sel = r.sel;
  const double median = r.timing.median;
  cli::print("layer: {} (E={}, top-{}, H={}, I={}{})\n", spec.name, spec.num_experts, spec.top_k,
             spec.hidden, spec.intermediate,
             spec.shared_experts > 0 ? fmt::format(", shared I={}", spec.shared_intermediate) : "");
  cli::print("expert parallel: {} ranks, placement {}\n", r.ranks,
             r.request.placement.empty() ? "contiguous ranges" : "from --placement");
  cli::print(
      "deployment: activation={}, batch_invariant={}, threads per rank={}, tokens={} on rank 0 "
      "(preferences: {})\n",
      to_string(*sel.deployment.request.activation), r.request.batch_invariant, r.request.threads,
      r.tokens, sel.preferences_source);
  cli::print("candidates (agreed by every rank):\n");
  for (const Verdict& v : sel.candidates) cli::print("{}\n", candidate_line(sel, v));
  cli::print("chosen: {} ({})\n", sel.chosen, sel.why);
  cli::print("time: {:.1f} us/call (median of {} after a warm-up; {} ranks)\n", median * 1e6,
             r.timing.reps, r.ranks);
  cli::print("throughput: {:.1f} tokens/s\n", static_cast<double>(r.tokens) / median);
  for (int rank = 0; rank < r.ranks; ++rank) {
    const auto i = static_cast<std::size_t>(rank);
    const ExpertParallelTimes& t = r.figures.times[i];
    const double calls = static_cast<double>(std::max<std::int64_t>(t.calls, 1));
    cli::print(
        "rank {}: {} experts, {:.1f} MB resident for the layer ({:.1f} MB packed); per call: "
        "route {:.0f} us, dispatch {:.0f} us, compute {:.0f} us, return {:.0f} us, combine "
        "{:.0f} us; {:.1f} kB sent, {:.1f} kB received\n",
        rank, r.placement.count(rank), r.figures.resident[i] / 1e6, r.figures.packed[i] / 1e6,
        us_per_call(t, t.route), us_per_call(t, t.dispatch), us_per_call(t, t.compute),
        us_per_call(t, t.returns), us_per_call(t, t.combine),
        static_cast<double>(t.bytes_sent) / calls / 1e3,
        static_cast<double>(t.bytes_received) / calls / 1e3);
  }
  if (!r.o.output.empty())
    cli::print("output: {} [{} x {}] float32\n", r.o.output, r.tokens, spec.hidden);
}

}  // namespace

int run_expert_parallel(const RunOptions& o, CLI::App& sub, Communicator& comm) {
  const bool root = comm.rank() == 0;
  Request request = ep_request(o, sub, comm);

  std::optional<Checkpoint> checkpoint;
  std::optional<LayerStorage> storage;
  const LayerSpec spec = open_layer(o.layer, checkpoint);
  agree_on_checkpoint(comm, checkpoint ? &*checkpoint : nullptr);
  const Placement placement = placement_of(request, spec.num_experts);

  const RootInput in = read_input_on_root(o, spec, comm);
  request.tokens_hint = static_cast<int>(in.tokens);

  const std::uint64_t rss_before = perf::resident_bytes();
  const LayerWeights weights = weights_of_rank(o, spec, checkpoint, placement, comm, storage);

  const Hardware hw = o.hardware.resolve();
  if (request.threads == 0) request.threads = threads_per_rank(comm, hw.logical_cpus);
  Runtime runtime(request.threads);
  ExpertParallelLayer layer =
      ExpertParallelLayer::create(spec, weights, hw, request, placement, runtime, comm);
  const Selection& sel = layer.selection();
  if (o.hardware.replayed()) require_runnable_here(sel, HardwareOptions::live());

  std::vector<float> y(in.x.size());
  const Timing timing = time_layer(o, layer, spec, in, y, comm);
  const RankFigures figures = gather_figures(layer, rss_before, comm);
  if (root && !o.output.empty()) {
    const std::int64_t shape[] = {in.tokens, spec.hidden};
    write_npy(o.output, y, shape);
  }
  barrier(comm);  // rank 0's output is written before any rank reports success
  if (!root) return kExitOk;

  const EpReport report{o, spec, sel, request, placement, in.tokens, comm.size(), timing, figures};
  if (o.json)
    print_json(report);
  else
    print_text(report);
  return kExitOk;
}

}  // namespace mxmoe::cli::run_detail
