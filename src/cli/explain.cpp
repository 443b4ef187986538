// `mxmoe explain`: every backend's verdict for a deployment, with all reasons, as a table or
// JSON. Exit 0 when a backend is selected, 3 when none fits, 2 for bad usage.
#include <fmt/core.h>

#include <memory>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/oracle.hpp"

namespace mxmoe::cli {
namespace {

struct ExplainOptions {
  LayerOptions layer;
  RequestOptions request;
  HardwareOptions hardware;
  bool json = false;
};

int run_explain(CLI::App& sub, const ExplainOptions& o) {
  const Request request = o.request.resolve(sub);
  const LayerSpec spec = o.layer.from_model()
                             ? Checkpoint::open(o.layer.model).layer_spec(o.layer.layer)
                             : o.layer.spec();
  const Deployment d{spec, o.hardware.resolve(), request};
  const Selection s = judge(d, preferences_for(spec.family));
  if (o.json) {
    fmt::print("{}\n", explain_json(s));
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
