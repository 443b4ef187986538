// PLACEHOLDER until its issue lands: the `info` subcommand.
#include "cli/command.hpp"
#include "cli/common.hpp"

namespace mxmoe::cli {

void add_info(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("info", "(not built yet)");
  sub->callback([&action] { action = [] { return kExitError; }; });
}

}  // namespace mxmoe::cli
