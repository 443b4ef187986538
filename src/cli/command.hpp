// How subcommands plug into the mxmoe executable (see commands.inc).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace mxmoe::cli {

// What a chosen subcommand runs; returns the process exit code (common.hpp: kExit*).
using Action = std::function<int()>;

// Adds subcommand NAME to APP with a fresh Options for its flags to fill; when it is the one
// chosen, ACTION becomes RUN(options), or RUN(options, subcommand) for a RUN that asks which
// flags were given. Returns the subcommand and the options, for the flags to be added.
template <class Options, class Run>
std::pair<CLI::App*, std::shared_ptr<Options>> add_command(CLI::App& app, Action& action,
                                                           std::string name,
                                                           std::string description, Run run) {
  CLI::App* sub = app.add_subcommand(std::move(name), std::move(description));
  auto options = std::make_shared<Options>();
  sub->callback([&action, sub, options, run] {
    action = [sub, options, run] {
      if constexpr (std::is_invocable_v<Run, Options&, CLI::App&>)
        return run(*options, *sub);
      else
        return run(*options);
    };
  });
  return {sub, options};
}

#define MXMOE_COMMAND(NAME) void add_##NAME(CLI::App& app, Action& action);
#include "cli/commands.inc"
#undef MXMOE_COMMAND

}  // namespace mxmoe::cli
