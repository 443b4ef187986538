// mxmoe: the command-line tool. Parses flags, runs the chosen subcommand, and maps errors
// to the exit codes of common.hpp (documented in --help and the README).
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <string_view>

#include "backends/registry.hpp"
#include "base/printable.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/ep.hpp"
#include "mxmoe/build_info.hpp"
#include "mxmoe/communicator.hpp"
#include "mxmoe/environment.hpp"
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
    "MXMOE_MAX_ISA=none|avx2|avx_vnni|avx512|amx|neon|dotprod|i8mm|sve (caps the probed "
    "instruction sets, so slower paths can be tried on a fast machine; avx_vnni: AVX2 and "
    "AVX-VNNI on ymm, no AVX-512, as Alder Lake; neon, dotprod, i8mm, sve: the aarch64 levels), "
    "MXMOE_EP_DEADLINE (seconds a rank waits for the others under mpirun). The C "
    "API and the Python package read them the same way.";

// One rule for every value on the command line, as for the MXMOE_* variables: an integer is
// decimal digits (a '-' first where it may be negative) within its type's range, never 0x10
// read as 16 or -1 wrapped to 2^64 - 1; no option takes an empty value ('--output ""' is a
// mistake, not "no output").
std::string strict_value(const std::string& value, const std::string& type) {
  if (value.empty()) return "expected a value, got an empty string";
  if (type != "INT" && type != "UINT") return "";
  const bool negative = value.front() == '-' && type == "INT";
  const std::string_view digits = std::string_view(value).substr(negative ? 1 : 0);
  const bool decimal = !digits.empty() && std::all_of(digits.begin(), digits.end(),
                                                      [](char c) { return c >= '0' && c <= '9'; });
  if (type == "UINT") {
    std::uint64_t n = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (!decimal || ec != std::errc() || end != digits.data() + digits.size())
      return fmt::format("expected a decimal integer in [0, {}], got '{}'",
                         std::numeric_limits<std::uint64_t>::max(), value);
    return "";
  }
  if (!decimal) return fmt::format("expected a decimal integer, got '{}'", value);
  return "";
}

void read_values_strictly(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_size_max() == 0) continue;  // a flag: takes no value
    std::string type = option->get_type_name();
    type = type.substr(0, type.find(':'));
    option->check(CLI::Validator([type](std::string& value) { return strict_value(value, type); },
                                 "", "strict"));
  }
  for (CLI::App* sub : app.get_subcommands({})) read_values_strictly(*sub);
}

// Every message leaves through here: a flag's value echoed raw (by the parser, or in our own
// text) cannot drive the terminal (mxmoe::printable_message).
void print_error(const std::string& text) {
  mxmoe::cli::write_printable(stderr, text);
}

int error(int code, const std::string& message) {
  print_error("mxmoe: error: " + message + "\n");
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // A write past `ulimit -f` then fails with EFBIG, which is reported (and the target file
  // kept), instead of SIGXFSZ killing the process in the middle of a file.
  std::signal(SIGXFSZ, SIG_IGN);

  CLI::App app{
      "mxmoe: Mixture-of-Experts models with MXFP4 expert weights, whole or layer by layer.\n"
      "One oracle judges every backend for your deployment and says why each one fits or not.\n"
      "Start with `mxmoe chat --model DIR` or `mxmoe complete --model DIR --prompt TEXT` (a whole "
      "gpt-oss, Qwen3-MoE or Mixtral; `mxmoe synth --full` writes one on random weights), "
      "`mxmoe run --preset tiny` (one layer) or `mxmoe explain`.",
      "mxmoe"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);
  app.fallthrough();
  app.footer(kFooter);

  mxmoe::cli::Action action;
#define MXMOE_COMMAND(NAME) mxmoe::cli::add_##NAME(app, action);
#include "cli/commands.inc"
#undef MXMOE_COMMAND
  read_values_strictly(app);

  if (argc < 2) {
    mxmoe::cli::print(stderr, "{}\n", app.help());
    return error(mxmoe::cli::kExitUsage, "a command is required: " + command_names(app));
  }
  const std::string first = argv[1];
  if (!first.empty() && first[0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) known = known || sub->check_name(first);
    if (!known)
      return error(mxmoe::cli::kExitUsage,
                   fmt::format("unknown command '{}'; commands: {} (mxmoe --help)", first,
                               command_names(app)));
  }
  if (first == "generate")
    mxmoe::cli::print(stderr, "mxmoe: note: `mxmoe generate` is now `mxmoe synth` (random-weight "
                              "checkpoints); the old name still works\n");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    print_error(CLI::FailureMessage::simple(&app, e));
    return mxmoe::cli::kExitUsage;
  }
  // Under mpirun every rank runs the command; the expert-parallel ones talk to each other.
  std::unique_ptr<mxmoe::cli::MpiScope> mpi;
  try {
    mpi = std::make_unique<mxmoe::cli::MpiScope>(&argc, &argv, mxmoe::cli::ep_deadline_of(app));
  } catch (const std::exception& e) {
    print_error(fmt::format("mxmoe: error: {}\n", e.what()));
    return mxmoe::cli::kExitUsage;
  }
  const bool group = mpi->active() && mpi->world_size() > 1;
  const std::string who = group ? fmt::format("rank {}: ", mpi->world_rank()) : "";
  // A rank that fails alone (a bad file on rank 0, a rank that stopped answering) ends the
  // whole job: the others would otherwise wait for it until their deadline.
  const auto fail = [&](int code, const std::string& message) {
    print_error(fmt::format("mxmoe: {}error: {}\n", who, message));
    return group ? (mpi->abort(code), code) : code;
  };
  if (group) {
    // Only run and bench are expert-parallel: any other command would run once per rank (N
    // reports, N writers of one file), and a rank left out would wait for the others.
    const auto subs = app.get_subcommands();
    const std::string name = subs.empty() ? "" : subs.front()->get_name();
    if (name != "run" && name != "bench")
      return fail(
          mxmoe::cli::kExitUsage,
          fmt::format("'mxmoe {}' under mpirun with {} ranks: only run and bench are "
                      "expert-parallel; run {} in one process{}",
                      name, mpi->world_size(), name,
                      name == "explain" ? " (explain --ep-size N shows a group of N ranks)" : ""));
  }
  try {
    mxmoe::apply_log_settings(mxmoe::cli::environment());
    return action ? action() : mxmoe::cli::kExitUsage;
  } catch (const mxmoe::NoBackendError& e) {
    // In a group every rank agreed on it and its message gathers every rank's reasons:
    // rank 0 prints it, once.
    if (group) {
      if (mpi->world_rank() == 0) print_error(fmt::format("{}\n", e.what()));
    } else {
      print_error(
          fmt::format("{}\n\n{}\n", mxmoe::format_selection_table(e.selection()), e.what()));
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
    // Raised because a signal asked the command to stop (a layer call or a write cut short,
    // its temporary removed): the documented exit of an interrupted command.
    if (const int signal = mxmoe::cli::StopOnSignal::signal(); signal != 0) {
      print_error(fmt::format("mxmoe: interrupted (signal {}): {}\n", signal, e.what()));
      return mxmoe::cli::kExitInterrupted;
    }
    return fail(mxmoe::cli::kExitError, e.what());
  }
}
