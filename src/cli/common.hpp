// The edge of the flow: turns flags (and, through the library's config_from_environment, the
// MXMOE_* variables) into Hardware, Request and LayerSpec, and holds the conventions every
// command shares:
// - exit codes: 0 ok, 1 runtime or input error (a file's contents, I/O, memory, non-finite
//   output), 2 usage error (a flag or MXMOE_* value, a combination of flags), 3 no backend
//   fits, 130 interrupted (Ctrl-C);
// - streams: stdout carries the command's result (a table, or one JSON document with
//   --json); stderr carries progress, warnings, the dispatch log and errors.
#pragma once

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/file.hpp"
#include "mxmoe/deployment.hpp"
#include "mxmoe/edge_checks.hpp"
#include "mxmoe/environment.hpp"
#include "mxmoe/oracle.hpp"

namespace mxmoe::cli {

// The one way the command prints, to stdout or (progress, warnings, errors) stderr: the text
// passes printable_message, so a name that came from a file, a path, a directory's name or a
// hardware probe cannot drive the terminal (issue 38); line breaks are kept, every other control
// byte is written \xNN. JSON needs nothing more: its writer escapes control bytes itself.
void write_printable(std::FILE* to, std::string_view text);
template <class... Args>
void print(std::FILE* to, fmt::format_string<Args...> format, Args&&... args) {
  write_printable(to, fmt::format(format, std::forward<Args>(args)...));
}
template <class... Args>
void print(fmt::format_string<Args...> format, Args&&... args) {
  write_printable(stdout, fmt::format(format, std::forward<Args>(args)...));
}

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNoBackend = 3;
inline constexpr int kExitInterrupted = 130;  // 128 + SIGINT, the shell's convention

// Bounds of the timing flags: --reps of run and bench.
inline constexpr int kMaxReps = 100000;

// A mistake in the command line: a flag's value or a combination of flags (exit code 2).
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The MXMOE_* variables, parsed once by the library (throws ConfigError: exit code 2).
const EnvironmentConfig& environment();

// --hardware FILE: replay a captured probe instead of probing this machine.
struct HardwareOptions {
  std::string file;
  void add(CLI::App& app);
  bool replayed() const { return !file.empty(); }
  Hardware resolve() const;  // the file, else live()
  static Hardware live();    // this machine's probe, capped by MXMOE_MAX_ISA
};

// The Request's flags. Flags win over the environment variables (environment.hpp).
struct RequestOptions {
  std::string backend;
  std::vector<std::string> exclude;
  std::string activation;
  bool batch_invariant = false;  // set by --batch-invariant
  bool allow_reference = false;  // set by --allow-reference
  int threads = 0;
  int tokens = 0;
  int ep_size = 1, ep_rank = 0;
  std::string placement;  // --placement FILE (JSON, mxmoe/placement.hpp)
  void add(CLI::App& app, bool with_tokens = true);
  // The environment's Request with the flags given (apply_request_overrides): a ConfigError
  // (exit code 2, as a UsageError) for an unknown backend name or activation format, a
  // number out of range or an ep_rank outside [0, ep_size); UsageError for a --placement
  // that disagrees with --ep-size.
  Request resolve(CLI::App& app) const;
};

// Where the layer comes from: --preset NAME (default gpt-oss-20b) or --model DIR --layer N.
// With several_layers (run, verify), --layer takes a comma list (--layer 0,3: each in turn,
// e.g. a DeepSeek-V4 hash layer and a routed one) into `layers`; otherwise one index.
struct LayerOptions {
  std::string preset;
  std::string model;
  int layer = 0;
  std::vector<int> layers{0};
  void add(CLI::App& app, bool several_layers = false);
  bool from_model() const { return !model.empty(); }
  LayerSpec spec() const;  // for presets only (UsageError for an unknown name)
  // The layers to run: `layers` with --model (UsageError for a list without --model).
  std::vector<int> selected_layers() const;
};

// Token ids for a hash-routed layer (DeepSeek-V4's first layers): --token-ids FILE, a .npy
// of `tokens` int32 or int64 ids, as int32. Throws LoadError naming the file (and the token)
// for a bad dtype or shape or an id outside [0, 2^31); the layer checks [0, vocab).
std::vector<std::int32_t> read_token_ids(const std::string& path, std::int64_t tokens);

// NAME as the registered backend that answers to it calls itself now (a former name
// resolved); throws UsageError when none does (WHAT names the flag).
std::string require_backend_name(const std::string& name, const std::string& what);

// A selection judged on replayed hardware runs only if this machine can run its backend too:
// a probe captured elsewhere is for explain and selection, never for executing a kernel the
// live CPU lacks. Throws NoBackendError (exit 3) with the live verdict and that explanation.
void require_runnable_here(const Selection& s, const Hardware& live);

// What a command reads, gathered from its flags, so that no output overwrites it: a file
// flag (--input, --hardware, --placement, --token-ids), the files of a checkpoint (--model:
// config.json, model.safetensors, the index and its shards), the current directory.
class CommandInputs {
 public:
  CommandInputs& file(const std::string& flag, const std::string& path);
  CommandInputs& checkpoint(const std::string& flag, const std::string& dir);
  CommandInputs& current_directory();
  const std::vector<files::CommandInput>& list() const noexcept { return list_; }

 private:
  std::vector<files::CommandInput> list_;
};

// The one preflight of every output a command writes, before any work: UsageError (exit 2)
// when OUTPUT (the value of FLAG) is one of INPUTS or, a directory to be replaced, holds one
// ("--output ckpt/config.json is config.json of --model ckpt, which this command reads").
// A file output (`directory` false) is then checked by files::check_can_create.
void check_output(const std::string& flag, const std::string& output, const CommandInputs& inputs,
                  bool directory = false);

// Bytes of memory the OS can give now (MemAvailable), or 0 when unknown.
std::uint64_t available_memory_bytes();
// Throws std::runtime_error (exit 1) when NEED bytes exceed the available memory, naming the
// bytes of each PART ("input 11.5 GB, output 11.5 GB, workspace 2.1 GB") and ending with
// REMEDY. Returns the sum of the parts (the estimate).
double require_memory(const std::string& what,
                      const std::vector<std::pair<std::string, double>>& parts,
                      const std::string& remedy = "use fewer tokens");

// "1.23 GB" / "456.7 MB" / "12.0 KB".
std::string bytes_text(double bytes);

// A flag's check that its value is a finite number in [LOW, HIGH]: CLI11's own Range and
// PositiveNumber pass NaN (every comparison with it is false).
CLI::Validator finite_in(double low, double high);

// Non-finite values of an output [tokens, width]: the library's scan (mxmoe/edge_checks.hpp),
// the one every edge reports with.
inline NonFinite find_non_finite(const std::vector<float>& y, std::int64_t tokens,
                                 std::int64_t width) {
  return mxmoe::find_non_finite(y.data(), tokens, width);
}

// While it lives, SIGINT, SIGTERM and SIGHUP do not kill the process but are recorded, so a
// long writer (quantize, generate; run's --output and its layer calls) polls stop_requested()
// between pieces and stops cleanly (its temporary deleted, exit 130: main maps any error
// raised after a signal to it). The previous handlers come back at destruction.
class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;
  static bool stop_requested() noexcept;
  static int signal() noexcept;  // the signal received, 0 if none

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  struct sigaction old_hup_ {};
};

}  // namespace mxmoe::cli
