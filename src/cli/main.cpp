// mxmoe: the command-line tool. Parses flags, runs the chosen subcommand, and maps errors
// to exit codes: 0 ok, 1 error, 2 bad usage, 3 no backend fits the deployment.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <string>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/ep.hpp"
#include "mxmoe/build_info.hpp"
#include "mxmoe/communicator.hpp"
#include "mxmoe/oracle.hpp"

namespace {

std::string version_text() {
  std::string backends;
  for (const mxmoe::Backend* b : mxmoe::registered_backends()) {
    if (!backends.empty()) backends += ", ";
    backends += b->name();
  }
  return fmt::format("mxmoe {}\ncompiler: {} ({} build)\nbackends compiled in: {}",
                     mxmoe::build_info::kVersion, mxmoe::build_info::kCompiler,
                     mxmoe::build_info::kBuildType, backends);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "mxmoe: Mixture-of-Experts layers with MXFP4 expert weights.\n"
      "One oracle judges every backend for your deployment and says why each one fits or not.\n"
      "Start with `mxmoe run` (a gpt-oss-20b layer on embedded weights) or `mxmoe explain`.",
      "mxmoe"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);
  app.fallthrough();

  mxmoe::cli::Action action;
#define MXMOE_COMMAND(NAME) mxmoe::cli::add_##NAME(app, action);
#include "cli/commands.inc"
#undef MXMOE_COMMAND

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : mxmoe::cli::kExitUsage;
  }
  // Under mpirun every rank runs the command; the expert-parallel ones talk to each other.
  std::unique_ptr<mxmoe::cli::MpiScope> mpi;
  try {
    mpi = std::make_unique<mxmoe::cli::MpiScope>(&argc, &argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "mxmoe: error: {}\n", e.what());
    return mxmoe::cli::kExitUsage;
  }
  const bool group = mpi->active() && mpi->world_size() > 1;
  const std::string who = group ? fmt::format("rank {}: ", mpi->world_rank()) : "";
  // A rank that fails alone (a bad file on rank 0, a rank that stopped answering) ends the
  // whole job: the others would otherwise wait for it until their deadline.
  const auto fail = [&](int code) { return group ? (mpi->abort(code), code) : code; };
  try {
    return action ? action() : mxmoe::cli::kExitUsage;
  } catch (const mxmoe::NoBackendError& e) {
    // In a group every rank agreed on it and its message gathers every rank's reasons:
    // rank 0 prints it, once.
    if (group) {
      if (mpi->world_rank() == 0) fmt::print(stderr, "{}\n", e.what());
    } else {
      fmt::print(stderr, "{}\n\n{}", mxmoe::format_selection_table(e.selection()), e.what());
      fmt::print(stderr, "\n");
    }
    return mxmoe::cli::kExitNoBackend;
  } catch (const mxmoe::CommError& e) {
    fmt::print(stderr, "mxmoe: error: {}\n", e.what());
    return fail(mxmoe::cli::kExitError);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "mxmoe: {}error: {}\n", who, e.what());
    return fail(mxmoe::cli::kExitUsage);
  } catch (const std::exception& e) {
    fmt::print(stderr, "mxmoe: {}error: {}\n", who, e.what());
    return fail(mxmoe::cli::kExitError);
  }
}
