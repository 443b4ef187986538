// mxmoe: the command-line tool. Parses flags, runs the chosen subcommand, and maps errors
// to the exit codes of common.hpp (documented in --help and the README).
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <exception>
#include <new>
#include <string>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/ep.hpp"
#include "mxmoe/build_info.hpp"
#include "mxmoe/communicator.hpp"
#include "mxmoe/config.hpp"
#include "mxmoe/oracle.hpp"

namespace {

std::string version_text() {
  return fmt::format("mxmoe {}\ncompiler: {} ({} build)\nbackends compiled in: {}",
                     mxmoe::build_info::kVersion, mxmoe::build_info::kCompiler,
                     mxmoe::build_info::kBuildType, mxmoe::backend_names());
}

std::string command_names(const CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({}))
    names += (names.empty() ? "" : ", ") + sub->get_name();
  return names;
}

constexpr const char* kFooter =
    "Exit codes: 0 ok; 1 runtime or input error (a file missing, unreadable or malformed, I/O, "
    "memory, non-finite output); 2 usage error (a flag or MXMOE_* value); 3 no backend fits "
    "the deployment; "
    "130 interrupted.\n"
    "Output: each command's result goes to stdout (a table, or one JSON document with "
    "--json); progress, warnings, the dispatch log and errors go to stderr.\n"
    "Environment (flags win): MXMOE_BACKEND, MXMOE_EXCLUDE_BACKENDS, MXMOE_ACTIVATION, "
    "MXMOE_BATCH_INVARIANT, MXMOE_THREADS, MXMOE_ALLOW_REFERENCE, MXMOE_VERBOSE=dispatch, "
    "MXMOE_MAX_ISA=none|avx2|avx_vnni|avx512|amx (caps the probed instruction sets, so slower "
    "paths can be tried on a fast machine; avx_vnni: AVX2 and AVX-VNNI on ymm, no AVX-512, as "
    "Alder Lake), MXMOE_EP_DEADLINE (seconds a rank waits for the others under mpirun). The C "
    "API and the Python package read them the same way.";

int error(int code, const std::string& message) {
  fmt::print(stderr, "mxmoe: error: {}\n", message);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // A write past `ulimit -f` then fails with EFBIG, which is reported (and the target file
  // kept), instead of SIGXFSZ killing the process in the middle of a file.
  std::signal(SIGXFSZ, SIG_IGN);

  CLI::App app{
      "mxmoe: Mixture-of-Experts layers with MXFP4 expert weights.\n"
      "One oracle judges every backend for your deployment and says why each one fits or not.\n"
      "Start with `mxmoe run --preset tiny` (a small layer on generated random weights) or "
      "`mxmoe explain`.",
      "mxmoe"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);
  app.fallthrough();
  app.footer(kFooter);

  mxmoe::cli::Action action;
#define MXMOE_COMMAND(NAME) mxmoe::cli::add_##NAME(app, action);
#include "cli/commands.inc"
#undef MXMOE_COMMAND

  if (argc < 2) {
    fmt::print(stderr, "{}\n", app.help());
    return error(mxmoe::cli::kExitUsage, "a command is required: " + command_names(app));
  }
  const std::string first = argv[1];
  if (!first.empty() && first[0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) known = known || sub->get_name() == first;
    if (!known)
      return error(mxmoe::cli::kExitUsage,
                   fmt::format("unknown command '{}'; commands: {} (mxmoe --help)", first,
                               command_names(app)));
  }
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
  const auto fail = [&](int code, const std::string& message) {
    fmt::print(stderr, "mxmoe: {}error: {}\n", who, message);
    return group ? (mpi->abort(code), code) : code;
  };
  if (group) {
    // Only run and bench are expert-parallel: any other command would run once per rank (N
    // reports, N writers of one file), and a rank left out would wait for the others.
    const auto subs = app.get_subcommands();
    const std::string name = subs.empty() ? "" : subs.front()->get_name();
    if (name != "run" && name != "bench")
      return fail(mxmoe::cli::kExitUsage,
                  fmt::format("'mxmoe {}' under mpirun with {} ranks: only run and bench are "
                              "expert-parallel; run {} in one process{}",
                              name, mpi->world_size(), name,
                              name == "explain" ? " (explain --ep-size N shows a group of N ranks)"
                                                : ""));
  }
  try {
    mxmoe::apply_log_settings(mxmoe::cli::environment());
    return action ? action() : mxmoe::cli::kExitUsage;
  } catch (const mxmoe::NoBackendError& e) {
    // In a group every rank agreed on it and its message gathers every rank's reasons:
    // rank 0 prints it, once.
    if (group) {
      if (mpi->world_rank() == 0) fmt::print(stderr, "{}\n", e.what());
    } else {
      fmt::print(stderr, "{}\n\n{}\n", mxmoe::format_selection_table(e.selection()), e.what());
    }
    return mxmoe::cli::kExitNoBackend;
  } catch (const mxmoe::CommError& e) {
    return fail(mxmoe::cli::kExitError, e.what());  // it names the rank at fault
  } catch (const mxmoe::cli::UsageError& e) {
    return fail(mxmoe::cli::kExitUsage, e.what());
  } catch (const mxmoe::ConfigError& e) {
    return fail(mxmoe::cli::kExitUsage, e.what());
  } catch (const std::bad_alloc&) {
    return fail(mxmoe::cli::kExitError,
                "out of memory: the request needs more memory than this machine can give (try "
                "fewer tokens or a smaller layer)");
  } catch (const std::exception& e) {
    return fail(mxmoe::cli::kExitError, e.what());
  }
}
