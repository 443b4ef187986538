// PLACEHOLDER until its issue lands: the `quantize` subcommand.
#include "cli/command.hpp"
#include "cli/common.hpp"

namespace mxmoe::cli {

void add_quantize(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("quantize", "(not built yet)");
  sub->callback([&action] { action = [] { return kExitError; }; });
}

}  // namespace mxmoe::cli
