// `mxmoe explain`: every backend's verdict for a deployment, with all reasons, as a table or
// JSON. Exit 0 when a backend is selected, 3 when none fits, 2 for bad usage.
#include <fmt/core.h>

#include <memory>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/oracle.hpp"
#include "oracle/json_io.hpp"

namespace mxmoe::cli {
namespace {

struct ExplainOptions {
  LayerOptions layer;
  RequestOptions request;
  HardwareOptions hardware;
  bool json = false;
};

json_io::Json explain_json(const Selection& s) {
  using json_io::Json;
  Json candidates = Json::array(), suggestions = Json::array();
  for (const Verdict& v : s.candidates) {
    Json reasons = Json::array();
    for (const Rejection& r : v.reasons) reasons.push_back(json_io::rejection_to_json(r));
    candidates.push_back({{"name", v.name},
                          {"supported", v.supported},
                          {"estimated_us", v.supported ? Json(v.estimated_us) : Json(nullptr)},
                          {"reasons", reasons}});
  }
  for (const Suggestion& g : s.suggestions) suggestions.push_back(json_io::suggestion_to_json(g));
  const bool none = s.chosen.empty();
  return Json{{"selected", none ? Json(nullptr) : Json(s.chosen)},
              {"why", none ? Json(nullptr) : Json(s.why)},
              {"preferences", s.preferences_source},
              {"deployment", json_io::deployment_to_json(s.deployment)},
              {"candidates", candidates},
              {"error", none ? Json(format_no_backend_message(s)) : Json(nullptr)},
              {"suggestions", suggestions}};
}

int run_explain(CLI::App& sub, const ExplainOptions& o) {
  const Request request = o.request.resolve(sub);
  const LayerSpec spec = o.layer.from_model()
                             ? Checkpoint::open(o.layer.model).layer_spec(o.layer.layer)
                             : o.layer.spec();
  const Deployment d{spec, o.hardware.resolve(), request};
  const Selection s = judge(d, preferences_for(spec.family));
  if (o.json) {
    fmt::print("{}\n", explain_json(s).dump(2));
  } else {
    fmt::print("{}", format_selection_table(s));
    if (s.chosen.empty()) fmt::print(stderr, "\n{}\n", format_no_backend_message(s));
  }
  return s.chosen.empty() ? kExitNoBackend : kExitOk;
}

}  // namespace

void add_explain(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand(
      "explain",
      "Every backend's verdict for a deployment, with all reasons (exit 3 when none fits)");
  auto options = std::make_shared<ExplainOptions>();
  options->layer.add(*sub);
  options->request.add(*sub);
  options->hardware.add(*sub);
  sub->add_flag("--json", options->json,
                "Print {selected, deployment, candidates, error, suggestions} as JSON");
  sub->callback(
      [&action, sub, options] { action = [sub, options] { return run_explain(*sub, *options); }; });
}

}  // namespace mxmoe::cli
