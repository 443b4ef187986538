#include "cli/bench_ep.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>

#include "base/file.hpp"
#include "cli/ep.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/expert_parallel.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Times `call` reps times (rank 0 decides reps after a warm-up, so every rank calls alike).
std::vector<double> time_calls(Communicator* comm, int wanted_reps,
                               const std::function<void()>& call) {
  const auto w0 = Clock::now();
  call();
  double warm = seconds(Clock::now() - w0);
  if (comm != nullptr) warm = from_rank0(*comm, warm);
  const int reps = wanted_reps > 0
                       ? wanted_reps
                       : std::clamp(static_cast<int>(1.0 / std::max(warm, 1e-6)), 3, 200);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    call();
    times.push_back(seconds(Clock::now() - t0));
  }
  return times;
}

}  // namespace

int bench_expert_parallel(const EpBenchOptions& o, Communicator& comm) {
  const bool root = comm.rank() == 0;
  std::string report;  // rank 0's
  const auto out = [&](const std::string& text) {
    if (root) report += text;
  };
  const auto note = [&](const std::string& text) {
    if (root) cli::print(stderr, "{}\n", text);
  };

  std::optional<Checkpoint> checkpoint;
  std::optional<LayerStorage> storage;
  const LayerSpec spec = open_layer(o.layer, checkpoint);
  agree_on_checkpoint(comm, checkpoint ? &*checkpoint : nullptr);
  Request request;
  if (!o.activation.empty()) request.activation = parse_activation_format(o.activation);
  request.batch_invariant = o.batch_invariant;
  if (!o.backend.empty() && o.backend != "auto") request.forced_backend = o.backend;
  request.excluded_backends = o.excluded;
  const Hardware hw = HardwareOptions::live();
  const int ranks_here = ranks_on_this_node(comm);
  request.threads = o.threads > 0 ? o.threads : std::max(1, hw.logical_cpus / ranks_here);
  request.tokens_hint = o.tokens.empty() ? 1 : o.tokens.front();
  const Placement placement = Placement::contiguous(spec.num_experts, comm.size());
  LayerWeights weights;
  if (checkpoint) {
    weights = checkpoint->layer_weights(o.layer.layer, placement.runs(comm.rank()));
  } else {
    note(fmt::format("generating random MXFP4 weights for {} on every rank...", spec.name));
    storage.emplace(LayerStorage::random(spec, 1000));
    weights = storage->weights();
  }
  Runtime runtime(request.threads);
  ExpertParallelLayer layer =
      ExpertParallelLayer::create(spec, weights, hw, request, placement, runtime, comm);

  // The one-process baseline: rank 0 alone, every expert, every logical CPU of the machine.
  std::optional<Runtime> whole_runtime;
  std::optional<MoeLayer> whole;
  LayerWeights all_weights;
  if (root && o.baseline) {
    all_weights = checkpoint ? checkpoint->layer_weights(o.layer.layer) : storage->weights();
    Request one = layer.selection().deployment.request;
    one.ep_size = 1;
    one.ep_rank = 0;
    one.placement.clear();
    one.forced_backend = layer.selection().chosen;  // the same numerics as the group
    one.threads = hw.logical_cpus;
    whole_runtime.emplace(one.threads);
    whole.emplace(all_weights, select({spec, hw, one}, preferences_for(spec.family)),
                  *whole_runtime);
  }

  out(fmt::format("## expert parallel: {} on {} ranks\n\n", spec.name, comm.size()));
  out(fmt::format(
      "backend {} (agreed by every rank), activation {}, {} threads per rank, tokens on {}. "
      "{} ranks run on this node and share its cores; rank 0 sees {} logical CPUs (mpirun "
      "binds ranks to cores unless --bind-to none). The baseline is one process with every "
      "expert and {} threads on the same machine.\n\n",
      layer.selection().chosen, to_string(*layer.selection().deployment.request.activation),
      request.threads, o.tokens_on_every_rank ? "every rank (split evenly)" : "rank 0", ranks_here,
      hw.logical_cpus, hw.logical_cpus));
  std::string per_rank =
      "| tokens | rank | experts | route us | dispatch us | compute us | return us | combine us | "
      "sent kB | received kB |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  out("| tokens | ranks | call us (median) | 1 process us | scaling vs 1 process | "
      "communication share | tokens/s |\n|---:|---:|---:|---:|---:|---:|---:|\n");

  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int tokens : o.tokens) {
    const int n = comm.size(), me = comm.rank();
    const std::int64_t mine =
        o.tokens_on_every_rank ? tokens / n + (me < tokens % n ? 1 : 0) : (root ? tokens : 0);
    std::vector<float> x(static_cast<std::size_t>(std::max<std::int64_t>(tokens, 1) * spec.hidden));
    for (float& v : x) v = normal(rng);
    // A hash-routed layer (DeepSeek-V4's first layers) routes by token id: random ids.
    std::vector<std::int32_t> token_ids;
    if (spec.routing == RoutingMethod::hash) {
      std::uniform_int_distribution<std::int32_t> id(0, spec.vocab - 1);
      token_ids.resize(static_cast<std::size_t>(std::max(tokens, 1)));
      for (std::int32_t& v : token_ids) v = id(rng);
    }
    const std::int32_t* ids = token_ids.empty() ? nullptr : token_ids.data();
    std::vector<float> y(x.size());
    layer.reset_times();
    const std::vector<double> calls =
        time_calls(&comm, o.reps, [&] { layer.forward(x.data(), ids, mine, y.data()); });
    const double call = from_rank0(comm, median(calls));
    ExpertParallelTimes t = layer.times();
    t.calls = std::max<std::int64_t>(t.calls, 1);
    const auto all = gather(comm, t);

    double one_process = 0;
    if (whole) {
      const std::vector<double> base = time_calls(nullptr, o.reps, [&] {
        whole->forward({.tokens = tokens, .x = x.data(), .y = y.data(), .token_ids = ids});
      });
      one_process = median(base);
    }
    barrier(comm);  // the others wait (sleeping) while rank 0 times the baseline

    // The critical path is route (token's rank) -> compute (owners) -> combine (token's
    // rank); whatever else a call takes is communication and waiting for it.
    double route = 0, compute = 0, combine = 0;
    for (const ExpertParallelTimes& r : all) {
      const double c = static_cast<double>(r.calls);
      route = std::max(route, r.route / c);
      compute = std::max(compute, r.compute / c);
      combine = std::max(combine, r.combine / c);
    }
    const double comm_share = std::max(0.0, call - route - compute - combine) / call;
    out(fmt::format("| {} | {} | {:.0f} | {} | {} | {:.0f}% | {:.1f} |\n", tokens, n, call * 1e6,
                    whole ? fmt::format("{:.0f}", one_process * 1e6) : "-",
                    whole ? fmt::format("{:.2f}x", one_process / call) : "-", comm_share * 100,
                    tokens / call));
    for (int r = 0; r < n; ++r) {
      const ExpertParallelTimes& e = all[static_cast<std::size_t>(r)];
      const double c = static_cast<double>(e.calls);
      per_rank += fmt::format(
          "| {} | {} | {} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | "
          "{:.1f} | {:.1f} |\n",
          tokens, r, placement.count(r), e.route / c * 1e6, e.dispatch / c * 1e6,
          e.compute / c * 1e6, e.returns / c * 1e6, e.combine / c * 1e6,
          static_cast<double>(e.bytes_sent) / c / 1e3,
          static_cast<double>(e.bytes_received) / c / 1e3);
    }
  }
  out("\nper rank, per call (dispatch and return include waiting for the slowest peer):\n\n" +
      per_rank);
  if (root) {
    if (o.output.empty()) {
      cli::print("{}", report);
    } else {
      files::write_file_atomically(o.output, report);
      note("bench: wrote " + o.output);
    }
  }
  barrier(comm);  // the report is written before any rank reports success
  return kExitOk;
}

}  // namespace mxmoe::cli
