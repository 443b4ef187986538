// How subcommands plug into the mxmoe executable (see commands.inc).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace mxmoe::cli {

// What a chosen subcommand runs; returns the process exit code (common.hpp: kExit*).
using Action = std::function<int()>;

#define MXMOE_COMMAND(NAME) void add_##NAME(CLI::App& app, Action& action);
#include "cli/commands.inc"
#undef MXMOE_COMMAND

}  // namespace mxmoe::cli
