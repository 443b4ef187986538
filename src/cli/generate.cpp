// `mxmoe generate`: a checkpoint of random MXFP4 MoE layers with a preset's shape (optionally
// resized), in the gpt-oss layout with the family's config.json: something to try the
// library, the C API and the Python package on without downloading a model.
#include "mxmoe/generate.hpp"

#include <fmt/core.h>

#include <memory>

#include "cli/command.hpp"
#include "cli/common.hpp"

namespace mxmoe::cli {
namespace {

struct GenerateFlags {
  std::string preset = "gpt-oss-20b";
  std::string out;
  int layers = 1;
  int experts = 0, top_k = 0, hidden = 0, intermediate = 0;  // 0: the preset's
  std::uint64_t seed = 1;
  bool force = false;
};

int generate(const GenerateFlags& o) {
  const LayerSpec spec = resize(preset(o.preset), {o.experts, o.top_k, o.hidden, o.intermediate});
  const double gb = 3.0 * spec.num_experts * spec.hidden * double{1} * spec.intermediate * 17 / 32 /
                    1e9 * o.layers;
  fmt::print(stderr,
             "mxmoe generate: {} layer(s) of {} (E={}, top-{}, H={}, I={}): {:.3f} GB of MXFP4\n",
             o.layers, spec.name, spec.num_experts, spec.top_k, spec.hidden, spec.intermediate, gb);
  mxmoe::GenerateOptions g;
  g.layers = o.layers;
  g.seed = o.seed;
  g.force = o.force;
  g.progress = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  generate_checkpoint(o.out, spec, g);
  fmt::print(stderr, "mxmoe generate: wrote {}\n", o.out);
  return kExitOk;
}

}  // namespace

void add_generate(CLI::App& app, Action& action) {
  auto opts = std::make_shared<GenerateFlags>();
  auto* sub = app.add_subcommand(
      "generate",
      "Write a checkpoint of random MXFP4 MoE layers with a preset's shape (config.json + "
      "safetensors in the gpt-oss layout), to try mxmoe without downloading a model");
  sub->add_option("--out", opts->out, "The checkpoint directory to write")->required();
  sub->add_option("--preset", opts->preset, "Shape and family of the layers")
      ->check(CLI::IsMember(preset_names()))
      ->capture_default_str();
  sub->add_option("--layers", opts->layers, "Number of MoE layers")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub->add_option("--experts", opts->experts, "Override the number of routed experts")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--top-k", opts->top_k, "Override the experts per token")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--hidden", opts->hidden, "Override H (a multiple of 32)")
      ->check(CLI::Range(32, 65536));
  sub->add_option("--intermediate", opts->intermediate, "Override I (a multiple of 32)")
      ->check(CLI::Range(32, 65536));
  sub->add_option("--seed", opts->seed, "Seed of the random weights (layer N uses seed + N)")
      ->capture_default_str();
  sub->add_flag("--force", opts->force, "Replace OUT if it exists (as a whole)");
  sub->footer(
      "Example: mxmoe generate --preset qwen3-30b-a3b --experts 8 --hidden 256 --intermediate "
      "128 --layers 2 --out /tmp/tiny-qwen\n"
      "The checkpoint is written beside OUT and renamed into place when complete.");
  sub->callback([&action, opts] { action = [opts] { return generate(*opts); }; });
}

}  // namespace mxmoe::cli
