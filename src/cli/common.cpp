#include "cli/common.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "backends/registry.hpp"
#include "base/file.hpp"
#include "base/printable.hpp"
#include "io/checkpoint_file.hpp"
#include "io/npy.hpp"
#include "model/model_config.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/placement.hpp"
#include "mxmoe/runtime.hpp"
#include "oracle/report.hpp"

namespace mxmoe::cli {

void write_printable(std::FILE* to, std::string_view text) {
  const std::string out = printable_message(text);
  std::fwrite(out.data(), 1, out.size(), to);
}

const EnvironmentConfig& environment() {
  static const EnvironmentConfig config = config_from_environment();
  return config;
}

std::string require_backend_name(const std::string& name, const std::string& what) {
  const Backend* b = find_backend(name);
  if (b == nullptr) throw UsageError(unknown_backend_message(what, name));
  return std::string(b->name());
}

void HardwareOptions::add(CLI::App& app) {
  app.add_option("--hardware", file,
                 "Replay a hardware description captured with `mxmoe info --hardware --json` "
                 "(e.g. examples/hardware/) instead of probing this machine (a probe is capped by "
                 "env MXMOE_MAX_ISA=none|avx2|avx_vnni|avx512|amx|neon|dotprod|i8mm|sve)");
}

Hardware HardwareOptions::live() {
  return probe_hardware(environment().max_isa);
}

Hardware HardwareOptions::resolve() const {
  if (file.empty()) return live();
  return hardware_from_file(file);
}

void RequestOptions::add(CLI::App& app, bool with_tokens) {
  app.add_option("--backend", backend, "Force a backend by name (env MXMOE_BACKEND)");
  app.add_option("--exclude", exclude, "Exclude backends (comma list; env MXMOE_EXCLUDE_BACKENDS)")
      ->delimiter(',');
  app.add_option("--activation", activation,
                 "Activation format: f32, bf16, int8, mxfp8 (env MXMOE_ACTIVATION; default: "
                 "the model family's preference). A whole model given bf16 also rounds its "
                 "dense matrices' activations to bf16 where the CPU has AVX-512 BF16 (twice "
                 "the f32 math's speed at prefill; docs/ACCURACY.md)");
  app.add_flag("--batch-invariant", batch_invariant,
               "Require bit-identical outputs per token whatever the batch "
               "(env MXMOE_BATCH_INVARIANT=1)");
  app.add_flag("--allow-reference", allow_reference,
               "Let the oracle choose the reference backend (obviously correct, "
               "hundreds of times slower) without forcing it (env MXMOE_ALLOW_REFERENCE=1)");
  app.add_option("--threads", threads,
                 fmt::format("Threads: 0 = all logical CPUs, at most {} (more than the CPUs is "
                             "allowed, with a warning; env MXMOE_THREADS)",
                             kMaxThreads))
      ->check(CLI::Range(0, kMaxThreads));
  if (with_tokens)
    app.add_option("--tokens", tokens, fmt::format("Tokens per call, 1..{}", kMaxTokensPerCall))
        ->check(CLI::Range(1, kMaxTokensPerCall));
  app.add_option("--ep-size", ep_size, "Expert-parallel world size")
      ->check(CLI::Range(1, kMaxExperts));
  app.add_option("--ep-rank", ep_rank, "Expert-parallel rank of this process, 0..ep-size - 1")
      ->check(CLI::Range(0, kMaxExperts - 1));
  app.add_option("--placement", placement,
                 "Expert placement over the ranks: JSON {\"ranks\": N, \"owner\": [rank of "
                 "each expert]} (default: contiguous ranges; sets --ep-size to N)");
}

namespace {

// A Request field as the flag that sets it (apply_request_overrides' messages).
std::string flag_of(std::string_view field) {
  if (field == "forced_backend") return "--backend";
  if (field == "excluded_backends") return "--exclude";
  if (field == "tokens_hint") return "--tokens";
  std::string flag = "--" + std::string(field);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

}  // namespace

Request RequestOptions::resolve(CLI::App& app) const {
  const auto given = [&](const char* flag) { return app.count(flag) > 0; };
  RequestOverrides o;
  if (given("--backend")) o.forced_backend = backend;
  if (given("--exclude")) o.excluded_backends = exclude;
  if (given("--activation")) o.activation = activation;
  if (given("--batch-invariant")) o.batch_invariant = batch_invariant;
  if (given("--allow-reference")) o.allow_reference = allow_reference;
  if (given("--threads")) o.threads = threads;
  if (tokens > 0) o.tokens_hint = tokens;
  o.ep_size = ep_size;
  o.ep_rank = ep_rank;
  std::vector<int> owners;
  if (!placement.empty()) {
    // Like --hardware: a file that cannot be read or parsed is an input error (exit 1).
    const Placement p = [&] {
      try {
        // 65,536 owners of at most 5 digits fit in under 0.5 MiB: 4 MiB is ample.
        constexpr std::uint64_t kMaxPlacementFileBytes = std::uint64_t{4} << 20;
        return placement_from_json(
            files::read_regular_file<std::invalid_argument>(placement, kMaxPlacementFileBytes));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(fmt::format("--placement {}: {}", placement, e.what()));
      }
    }();
    if (given("--ep-size") && ep_size != p.ranks())
      throw UsageError(fmt::format("--placement {} places experts on {} ranks, --ep-size is {}",
                                   placement, p.ranks(), ep_size));
    o.ep_size = p.ranks();
    owners = p.owners();
  }
  // A bad value is a ConfigError: exit code 2, as for a bad variable.
  Request r = apply_request_overrides(environment().request, o, flag_of);
  r.placement = std::move(owners);
  return r;
}

void LayerOptions::add(CLI::App& app, bool several_layers) {
  std::string names;
  for (const std::string& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  auto* p = app.add_option(
      "--preset", preset,
      "Layer shape preset, on generated random MXFP4 weights: " + names + " (default gpt-oss-20b)");
  auto* m = app.add_option("--model", model, "Checkpoint directory (config.json + safetensors)");
  p->excludes(m);
  if (several_layers) {
    app.add_option("--layer", layers,
                   "Layer index in the model (with --model); a comma list runs each in turn")
        ->delimiter(',')
        ->check(CLI::Range(0, kMaxModelLayers - 1))
        ->needs(m);  // beside --preset it would be ignored
  } else {
    app.add_option("--layer", layer, "Layer index in the model (with --model)")
        ->check(CLI::Range(0, kMaxModelLayers - 1))
        ->needs(m);
  }
}

std::vector<int> LayerOptions::selected_layers() const {
  if (from_model()) return layers;
  if (layers != std::vector<int>{0}) throw UsageError("--layer needs --model");
  return {0};
}

CommandInputs& CommandInputs::file(const std::string& flag, const std::string& path) {
  if (!path.empty()) list_.push_back({flag + " " + files::printable(path), path});
  return *this;
}

CommandInputs& CommandInputs::checkpoint(const std::string& flag, const std::string& dir) {
  if (dir.empty()) return *this;
  list_.push_back({flag + " " + files::printable(dir), dir});
  for (const std::string& name : io::checkpoint_file_names(dir))
    list_.push_back(
        {files::printable(name) + " of " + flag + " " + files::printable(dir), dir + "/" + name});
  return *this;
}

CommandInputs& CommandInputs::current_directory() {
  list_.push_back({"the current directory", "."});
  return *this;
}

void check_output(const std::string& flag, const std::string& output, const CommandInputs& inputs,
                  bool directory) {
  if (const auto input = files::input_destroyed_by(output, inputs.list()))
    throw UsageError(fmt::format("{} {}: {} {}, which this command reads; write elsewhere", flag,
                                 files::printable(output), directory ? "is or contains" : "is",
                                 input->what));
  if (!directory) files::check_can_create(output);
}

std::vector<std::int32_t> read_token_ids(const std::string& path, std::int64_t tokens) {
  const NpyInts ids = read_npy_ints(path);
  if (ids.shape.size() != 1 || ids.shape[0] != tokens)
    throw LoadError(fmt::format(
        "--token-ids {}: expected shape [{}] (one id per token of the input), got {}", path, tokens,
        ids.shape.size() == 1 ? fmt::format("[{}]", ids.shape[0])
                              : fmt::format("{} dimensions", ids.shape.size())));
  std::vector<std::int32_t> out(ids.data.size());
  for (std::size_t t = 0; t < out.size(); ++t) {
    if (ids.data[t] < 0 || ids.data[t] > std::numeric_limits<std::int32_t>::max())
      throw LoadError(fmt::format("--token-ids {}: token {} has id {}, outside [0, 2^31)", path, t,
                                  ids.data[t]));
    out[t] = static_cast<std::int32_t>(ids.data[t]);
  }
  return out;
}

LayerSpec LayerOptions::spec() const {
  try {
    return mxmoe::preset(preset.empty() ? "gpt-oss-20b" : preset);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--preset: ") + e.what());
  }
}

void require_runnable_here(const Selection& s, const Hardware& live) {
  const Backend* b = find_backend(s.chosen);
  if (b == nullptr) return;
  Deployment here = s.deployment;
  here.hardware = live;
  const std::vector<Rejection> reasons = b->check(here);
  if (reasons.empty()) return;
  Selection refused = s;
  refused.deployment = here;
  refused.chosen.clear();
  refused.why.clear();
  for (Verdict& v : refused.candidates) {
    if (v.name != s.chosen) continue;
    v.supported = false;
    v.reasons = reasons;
  }
  std::string list;
  for (const Rejection& r : reasons) list += fmt::format("\n  {}: {}", to_string(r.code), r.detail);
  throw NoBackendError(std::move(refused),
                       fmt::format("The replayed hardware ({}) selects {}, but this machine "
                                   "cannot run it:{}\nA replayed probe is for `mxmoe explain` "
                                   "and selection; running needs this machine's own probe "
                                   "(drop --hardware).",
                                   s.deployment.hardware.source, s.chosen, list));
}

std::uint64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t value = 0;
  std::string unit;
  while (meminfo >> key >> value) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") return value * 1024;
  }
  return 0;
}

std::string bytes_text(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.1f} KB", bytes / 1e3);
}

double require_memory(const std::string& what,
                      const std::vector<std::pair<std::string, double>>& parts,
                      const std::string& remedy) {
  const std::uint64_t available = available_memory_bytes();
  double need = 0;
  std::string list;
  for (const auto& [name, bytes] : parts) {
    need += bytes;
    list += fmt::format("{}{} {}", list.empty() ? "" : ", ", name, bytes_text(bytes));
  }
  if (available == 0 || need <= static_cast<double>(available)) return need;
  throw std::runtime_error(fmt::format(
      "{} needs {} ({:.0f} bytes: {}), more than the {} of memory available now (MemAvailable); "
      "{}",
      what, bytes_text(need), need, list, bytes_text(static_cast<double>(available)), remedy));
}

namespace {

// Set by SIGINT/SIGTERM/SIGHUP while a StopOnSignal lives (a signal handler may only store to a
// lock-free atomic or a sig_atomic_t): the one piece of process state the handler needs.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void request_stop(int signal) {
  g_stop_signal = signal;
}

}  // namespace

StopOnSignal::StopOnSignal() {
  g_stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = &request_stop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &old_int_);
  sigaction(SIGTERM, &action, &old_term_);
  sigaction(SIGHUP, &action, &old_hup_);  // the terminal closed
}

StopOnSignal::~StopOnSignal() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGHUP, &old_hup_, nullptr);
}

bool StopOnSignal::stop_requested() noexcept {
  return g_stop_signal != 0;
}

int StopOnSignal::signal() noexcept {
  return static_cast<int>(g_stop_signal);
}

CLI::Validator finite_in(double low, double high) {
  return CLI::Validator(
      [low, high](std::string& value) {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(v) || v < low ||
            v > high)
          return fmt::format("'{}' is not a finite number in [{}, {}]", files::printable(value),
                             low, high);
        return std::string();
      },
      fmt::format("FLOAT in [{}, {}]", low, high));
}

}  // namespace mxmoe::cli
