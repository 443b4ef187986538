// `mxmoe explain`: every backend's verdict for a deployment, with all reasons, as a table or
// JSON. Exit 0 when a backend is selected, 3 when none fits, 2 for bad usage.
#include <fmt/core.h>

#include <algorithm>
#include <memory>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/oracle.hpp"
#include "mxmoe/placement.hpp"
#include "oracle/json_io.hpp"
#include "oracle/report.hpp"
#include "perf/workload.hpp"

namespace mxmoe::cli {
namespace {

struct ExplainOptions {
  LayerOptions layer;
  RequestOptions request;
  HardwareOptions hardware;
  bool json = false;
};

// Per-rank memory and the expert_parallel predicates of an expert-parallel request.
struct ExpertParallelView {
  std::vector<perf::RankMemory> ranks;
  std::vector<std::string> problems;  // expert_parallel reasons (the same for every backend)
};

ExpertParallelView expert_parallel_view(const Selection& s) {
  ExpertParallelView v;
  const Deployment& d = s.deployment;
  for (const Verdict& c : s.candidates)
    for (const Rejection& r : c.reasons)
      if (r.code == ReasonCode::expert_parallel &&
          std::find(v.problems.begin(), v.problems.end(), describe_rejection(r)) ==
              v.problems.end())
        v.problems.push_back(describe_rejection(r));
  if (v.problems.empty())
    v.ranks = perf::rank_memory(d.layer, placement_of(d.request, d.layer.num_experts));
  return v;
}

std::string expert_parallel_text(const Selection& s) {
  const Request& r = s.deployment.request;
  const ExpertParallelView v = expert_parallel_view(s);
  std::string out =
      fmt::format("\nexpert parallel: ep_size={}, this rank {}, placement {}\n", r.ep_size,
                  r.ep_rank, r.placement.empty() ? "contiguous ranges" : "from the request");
  if (!v.problems.empty()) {
    for (const std::string& p : v.problems) out += "  " + p + "\n";
    return out;
  }
  out += "  expert_parallel: ok (every backend accepts the group and the placement)\n";
  out +=
      "  per-rank memory for this layer (experts held + router and shared expert on every "
      "rank):\n";
  const auto mb = [](std::uint64_t bytes) { return static_cast<double>(bytes) / 1e6; };
  for (const perf::RankMemory& m : v.ranks)
    out += fmt::format(
        "  {} rank {}: {} experts, {:.1f} MB experts + {:.1f} MB replicated = "
        "{:.1f} MB\n",
        m.rank == r.ep_rank ? '*' : ' ', m.rank, m.experts, mb(m.expert_bytes),
        mb(m.replicated_bytes), mb(m.total()));
  return out;
}

// The library's explain document (explain_json, the same as Python's explain()), and for an
// expert-parallel request "expert_parallel": {ep_size, ep_rank, problems, ranks: per-rank
// memory}.
std::string explain_json_with_ranks(const Selection& s) {
  using json_io::Json;
  if (s.deployment.request.ep_size == 1) return explain_json(s);
  Json doc = json::parse_strict(explain_json(s), "explain");
  const ExpertParallelView ep = expert_parallel_view(s);
  Json ranks = Json::array();
  for (const perf::RankMemory& m : ep.ranks)
    ranks.push_back({{"rank", m.rank},
                     {"experts", m.experts},
                     {"expert_bytes", m.expert_bytes},
                     {"replicated_bytes", m.replicated_bytes}});
  doc["expert_parallel"] = Json{{"ep_size", s.deployment.request.ep_size},
                                {"ep_rank", s.deployment.request.ep_rank},
                                {"problems", ep.problems},
                                {"ranks", ranks}};
  return doc.dump(2);
}

int run_explain(const ExplainOptions& o, CLI::App& sub) {
  const Request request = o.request.resolve(sub);
  const LayerSpec spec = o.layer.from_model()
                             ? Checkpoint::open(o.layer.model).layer_spec(o.layer.layer)
                             : o.layer.spec();
  const Deployment d{spec, o.hardware.resolve(), request};
  const Selection s = judge(d, preferences_for(spec.family));
  if (o.json) {
    cli::print("{}\n", explain_json_with_ranks(s));
  } else {
    cli::print("{}", format_selection_table(s));
    if (s.deployment.request.ep_size != 1) cli::print("{}", expert_parallel_text(s));
    if (s.chosen.empty()) cli::print(stderr, "\n{}\n", format_no_backend_message(s));
  }
  return s.chosen.empty() ? kExitNoBackend : kExitOk;
}

}  // namespace

void add_explain(CLI::App& app, Action& action) {
  const auto [sub, options] = add_command<ExplainOptions>(
      app, action, "explain",
      "Every backend's verdict for a deployment, with all reasons (exit 3 when none fits)",
      run_explain);
  options->layer.add(*sub);
  options->request.add(*sub);
  options->hardware.add(*sub);
  sub->add_flag("--json", options->json,
                "Print {selected, deployment, candidates, error, suggestions} as JSON (and "
                "expert_parallel with --ep-size or --placement)");
}

}  // namespace mxmoe::cli
