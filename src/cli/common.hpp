// The edge of the flow: turns flags and MXMOE_* environment variables into Hardware,
// Request and LayerSpec. Nothing below the CLI reads the environment.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mxmoe/checkpoint.hpp"
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
  void add(CLI::App& app, bool with_tokens = true);
  Request resolve(CLI::App& app) const;
};

// Where the layer comes from: --preset NAME (default gpt-oss-20b) or --model DIR --layer N.
// With several_layers (run, verify), --layer takes a list (--layer 0,3) into `layers`;
// otherwise one index into `layer`.
struct LayerOptions {
  std::string preset;
  std::string model;
  int layer = 0;
  std::vector<int> layers{0};
  void add(CLI::App& app, bool several_layers = false);
  bool from_model() const { return !model.empty(); }
  LayerSpec spec() const;  // for presets only; model specs come from src/io
};

// One layer of a run or verify: mapped from the checkpoint (when given), else random MXFP4
// weights of the preset's shape (announced on stderr as "mxmoe COMMAND: generating ...").
struct LoadedLayer {
  LayerSpec spec;
  std::optional<LayerStorage> storage;  // the random weights; empty for a checkpoint's layer
  LayerWeights weights;
};
LoadedLayer load_layer(const LayerOptions& o, const Checkpoint* checkpoint, int index,
                       std::uint64_t seed, const char* command);

// Token ids for a hash-routed layer (DeepSeek-V4's first layers): --token-ids FILE, a .npy
// of `tokens` int32 or int64 ids, as int32 (std::invalid_argument naming the file and the
// token for a bad shape or an id outside int32; the layer checks [0, vocab)).
std::vector<std::int32_t> read_token_ids(const std::string& path, std::int64_t tokens);

// Reads an environment variable through one place (the edge), "" when unset.
std::string env(const char* name);

// MXMOE_VERBOSE=dispatch (or a comma list containing it): one line per candidate on stderr
// (name, verdict, codes). Every command that selects calls this after judge()/select().
void log_dispatch(const Selection& s);

}  // namespace mxmoe::cli
