// PLACEHOLDER until its issue lands: the `explain` subcommand.
#include "cli/command.hpp"
#include "cli/common.hpp"

namespace mxmoe::cli {

void add_explain(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("explain", "(not built yet)");
  sub->callback([&action] { action = [] { return kExitError; }; });
}

}  // namespace mxmoe::cli
