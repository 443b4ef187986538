// `mxmoe info`: the hardware probe (--hardware, the default) or a checkpoint (--model DIR).
// `info --hardware --json` writes exactly what `--hardware FILE` replays; with --model too,
// one JSON document with the probe under "hardware".
#include <fmt/core.h>

#include <memory>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/model_info.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/oracle.hpp"

namespace mxmoe::cli {
namespace {

struct InfoOptions {
  bool hardware = false;
  bool json = false;
  std::string model;
};

int run_info(const InfoOptions& o) {
  if (!o.model.empty() && !o.hardware) return info_model(o.model, o.json);
  const Hardware h = HardwareOptions::live();
  if (!o.model.empty()) {
    // Both: one JSON document (the probe under "hardware"), or the two texts in turn.
    if (o.json) {
      const std::string hardware = to_json(h);
      return info_model(o.model, true, &hardware);
    }
    const int rc = info_model(o.model, false);
    cli::print("{}", format_hardware_report(h));
    return rc;
  }
  if (o.json)
    cli::print("{}\n", to_json(h));
  else
    cli::print("{}", format_hardware_report(h));
  return kExitOk;
}

}  // namespace

void add_info(CLI::App& app, Action& action) {
  const auto [sub, options] = add_command<InfoOptions>(
      app, action, "info", "The hardware probe (--hardware, default) or a checkpoint (--model DIR)",
      run_info);
  sub->add_flag("--hardware", options->hardware,
                "Print this machine's probe (the JSON form is replayable with --hardware FILE)");
  sub->add_flag("--json", options->json, "Print JSON");
  sub->add_option("--model", options->model, "Checkpoint directory to describe");
}

}  // namespace mxmoe::cli
