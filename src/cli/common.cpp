#include "cli/common.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "io/mapped_file.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/placement.hpp"
#include "oracle/report.hpp"

namespace mxmoe::cli {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

namespace {
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

bool parse_bool_env(const char* name, const std::string& v) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) return false;
  throw std::invalid_argument(std::string(name) + "=" + v +
                              " is not a boolean (use 1/0, true/false)");
}
}  // namespace

void HardwareOptions::add(CLI::App& app) {
  app.add_option("--hardware", file,
                 "Replay a hardware description captured with `mxmoe info --hardware --json` "
                 "instead of probing this machine")
      ->check(CLI::ExistingFile);
}

Hardware HardwareOptions::resolve() const {
  if (file.empty()) return probe_hardware(env("MXMOE_MAX_ISA"));
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read hardware file " + file);
  std::stringstream text;
  text << in.rdbuf();
  Hardware hw = hardware_from_json(text.str());
  hw.source = file;
  return hw;
}

void RequestOptions::add(CLI::App& app, bool with_tokens) {
  app.add_option("--backend", backend, "Force a backend by name (env MXMOE_BACKEND)");
  app.add_option("--exclude", exclude, "Exclude backends (comma list; env MXMOE_EXCLUDE_BACKENDS)")
      ->delimiter(',');
  app.add_option("--activation", activation,
                 "Activation format: f32, bf16, int8, mxfp8 (env MXMOE_ACTIVATION; default: "
                 "the model family's preference)");
  app.add_flag("--batch-invariant", batch_invariant,
               "Require bit-identical outputs per token whatever the batch "
               "(env MXMOE_BATCH_INVARIANT=1)");
  app.add_option("--threads", threads, "Threads (0 = all logical CPUs; env MXMOE_THREADS)")
      ->check(CLI::NonNegativeNumber);
  if (with_tokens)
    app.add_option("--tokens", tokens, "Tokens per call (a hint for ranking backends)")
        ->check(CLI::PositiveNumber);
  app.add_option("--ep-size", ep_size, "Expert-parallel world size")->check(CLI::PositiveNumber);
  app.add_option("--ep-rank", ep_rank, "Expert-parallel rank of this process")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--placement", placement,
                 "Expert placement over the ranks: JSON {\"ranks\": N, \"owner\": [rank of "
                 "each expert]} (default: contiguous ranges; sets --ep-size to N)")
      ->check(CLI::ExistingFile);
}

Request RequestOptions::resolve(CLI::App& app) const {
  Request r;
  const auto given = [&](const char* flag) { return app.count(flag) > 0; };

  r.forced_backend = given("--backend") ? backend : env("MXMOE_BACKEND");
  if (given("--exclude")) {
    r.excluded_backends = exclude;
  } else {
    r.excluded_backends = split_commas(env("MXMOE_EXCLUDE_BACKENDS"));
    for (std::string& name : split_commas(env("MXMOE_EXCLUDE")))
      r.excluded_backends.push_back(name);
  }
  const std::string act = given("--activation") ? activation : env("MXMOE_ACTIVATION");
  if (!act.empty()) r.activation = parse_activation_format(act);
  r.batch_invariant = given("--batch-invariant")
                          ? batch_invariant
                          : parse_bool_env("MXMOE_BATCH_INVARIANT", env("MXMOE_BATCH_INVARIANT"));
  if (given("--threads")) {
    r.threads = threads;
  } else if (const std::string t = env("MXMOE_THREADS"); !t.empty()) {
    r.threads = std::stoi(t);
    if (r.threads < 0) throw std::invalid_argument("MXMOE_THREADS must be >= 0");
  }
  if (tokens > 0) r.tokens_hint = tokens;
  r.ep_size = ep_size;
  r.ep_rank = ep_rank;
  if (!placement.empty()) {
    const Placement p = placement_from_json(io::read_text_file(placement));
    if (given("--ep-size") && ep_size != p.ranks())
      throw std::invalid_argument(
          fmt::format("--placement {} places experts on {} ranks, "
                      "--ep-size is {}",
                      placement, p.ranks(), ep_size));
    r.ep_size = p.ranks();
    r.placement = p.owners();
  }
  return r;
}

void LayerOptions::add(CLI::App& app) {
  auto* p = app.add_option("--preset", preset,
                           "Layer shape preset: gpt-oss-20b (default), gpt-oss-120b, "
                           "deepseek-v4-flash, deepseek-v3, qwen3-30b-a3b, mixtral-8x7b");
  auto* m = app.add_option("--model", model, "Checkpoint directory (config.json + safetensors)")
                ->check(CLI::ExistingDirectory);
  p->excludes(m);
  app.add_option("--layer", layer, "Layer index in the model (with --model)")
      ->check(CLI::NonNegativeNumber);
}

void log_dispatch(const Selection& s) {
  const std::vector<std::string> modes = split_commas(env("MXMOE_VERBOSE"));
  if (std::find(modes.begin(), modes.end(), "dispatch") == modes.end()) return;
  std::fputs(format_dispatch_log(s).c_str(), stderr);
}

LayerSpec LayerOptions::spec() const {
  return mxmoe::preset(preset.empty() ? "gpt-oss-20b" : preset);
}

}  // namespace mxmoe::cli
