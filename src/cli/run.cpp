// PLACEHOLDER until its issue lands: the `run` subcommand.
#include "cli/command.hpp"
#include "cli/common.hpp"

namespace mxmoe::cli {

void add_run(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("run", "(not built yet)");
  sub->callback([&action] { action = [] { return kExitError; }; });
}

}  // namespace mxmoe::cli
