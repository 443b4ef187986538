// PLACEHOLDER until its issue lands: the `backends` subcommand.
#include "cli/command.hpp"
#include "cli/common.hpp"

namespace mxmoe::cli {

void add_backends(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("backends", "(not built yet)");
  sub->callback([&action] { action = [] { return kExitError; }; });
}

}  // namespace mxmoe::cli
