// The edge of the flow: turns flags and MXMOE_* environment variables into Hardware,
// Request and LayerSpec. Nothing below the CLI reads the environment.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mxmoe/deployment.hpp"
#include "mxmoe/oracle.hpp"

namespace mxmoe::cli {

// Exit codes shared by every command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNoBackend = 3;

// --hardware FILE: replay a captured probe instead of probing this machine.
struct HardwareOptions {
  std::string file;
  void add(CLI::App& app);
  Hardware resolve() const;  // file, else probe_hardware(MXMOE_MAX_ISA)
};

// The Request's flags. Flags win over the environment variables:
//   MXMOE_BACKEND, MXMOE_EXCLUDE_BACKENDS or MXMOE_EXCLUDE (comma lists, joined),
//   MXMOE_ACTIVATION,
//   MXMOE_BATCH_INVARIANT (1/true/0/false), MXMOE_THREADS.
struct RequestOptions {
  std::string backend;
  std::vector<std::string> exclude;
  std::string activation;
  bool batch_invariant = false;  // set by --batch-invariant
  int threads = 0;
  int tokens = 0;
  int ep_size = 1, ep_rank = 0;
  std::string placement;  // --placement FILE (JSON, mxmoe/placement.hpp)
  void add(CLI::App& app, bool with_tokens = true);
  Request resolve(CLI::App& app) const;
};

// Where the layer comes from: --preset NAME (default gpt-oss-20b) or --model DIR --layer N.
struct LayerOptions {
  std::string preset;
  std::string model;
  int layer = 0;
  void add(CLI::App& app);
  bool from_model() const { return !model.empty(); }
  LayerSpec spec() const;  // for presets only; model specs come from src/io
};

// Reads an environment variable through one place (the edge), "" when unset.
std::string env(const char* name);

// MXMOE_VERBOSE=dispatch (or a comma list containing it): one line per candidate on stderr
// (name, verdict, codes). Every command that selects calls this after judge()/select().
void log_dispatch(const Selection& s);

}  // namespace mxmoe::cli
