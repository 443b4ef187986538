// PLACEHOLDER until its issue lands: the `bench` subcommand.
#include "cli/command.hpp"
#include "cli/common.hpp"

namespace mxmoe::cli {

void add_bench(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("bench", "(not built yet)");
  sub->callback([&action] { action = [] { return kExitError; }; });
}

}  // namespace mxmoe::cli
