// PLACEHOLDER until its issue lands: the `verify` subcommand.
#include "cli/command.hpp"
#include "cli/common.hpp"

namespace mxmoe::cli {

void add_verify(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("verify", "(not built yet)");
  sub->callback([&action] { action = [] { return kExitError; }; });
}

}  // namespace mxmoe::cli
