// `mpirun -n N mxmoe run ...`: one layer over the ranks of an expert-parallel group, each
// rank's figures printed by rank 0.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "cli/run_common.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/expert_parallel.hpp"
#include "mxmoe/npy.hpp"
#include "perf/memory.hpp"

namespace mxmoe::cli::run_detail {

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
  agree_on_checkpoint(comm, checkpoint ? &*checkpoint : nullptr);
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
    out.update({{"tokens", tokens},
                {"ep_size", comm.size()},
                {"placement", request.placement.empty() ? "contiguous" : "from --placement"},
                {"threads_per_rank", request.threads},
                {"reps", reps},
                {"us_per_call_median", median * 1e6},
                {"tokens_per_s", static_cast<double>(tokens) / median},
                {"ranks", ranks},
                {"output", o.output.empty() ? json::Json(nullptr) : json::Json(o.output)}});
    cli::print("{}\n", out.dump(2));
    return kExitOk;
  }
  cli::print("layer: {} (E={}, top-{}, H={}, I={}{})\n", spec.name, spec.num_experts, spec.top_k,
             spec.hidden, spec.intermediate,
             spec.shared_experts > 0 ? fmt::format(", shared I={}", spec.shared_intermediate) : "");
  cli::print("expert parallel: {} ranks, placement {}\n", comm.size(),
             request.placement.empty() ? "contiguous ranges" : "from --placement");
  cli::print(
      "deployment: activation={}, batch_invariant={}, threads per rank={}, tokens={} on rank 0 "
      "(preferences: {})\n",
      to_string(*sel.deployment.request.activation), request.batch_invariant, request.threads,
      tokens, sel.preferences_source);
  cli::print("candidates (agreed by every rank):\n");
  for (const Verdict& v : sel.candidates) cli::print("{}\n", candidate_line(sel, v));
  cli::print("chosen: {} ({})\n", sel.chosen, sel.why);
  cli::print("time: {:.1f} us/call (median of {} after a warm-up; {} ranks)\n", median * 1e6, reps,
             comm.size());
  cli::print("throughput: {:.1f} tokens/s\n", static_cast<double>(tokens) / median);
  for (int r = 0; r < comm.size(); ++r) {
    const auto i = static_cast<std::size_t>(r);
    const ExpertParallelTimes& t = all_times[i];
    const double calls = static_cast<double>(std::max<std::int64_t>(t.calls, 1));
    cli::print(
        "rank {}: {} experts, {:.1f} MB resident for the layer ({:.1f} MB packed); per call: "
        "route {:.0f} us, dispatch {:.0f} us, compute {:.0f} us, return {:.0f} us, combine "
        "{:.0f} us; {:.1f} kB sent, {:.1f} kB received\n",
        r, placement.count(r), resident[i] / 1e6, packed[i] / 1e6, per_call(t, t.route),
        per_call(t, t.dispatch), per_call(t, t.compute), per_call(t, t.returns),
        per_call(t, t.combine), static_cast<double>(t.bytes_sent) / calls / 1e3,
        static_cast<double>(t.bytes_received) / calls / 1e3);
  }
  if (!o.output.empty())
    cli::print("output: {} [{} x {}] float32\n", o.output, tokens, spec.hidden);
  return kExitOk;
}

}  // namespace mxmoe::cli::run_detail
