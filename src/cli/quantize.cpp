// `mxmoe quantize --model IN --out OUT [--scale-rule floor|round_up] [--force]`.
#include <fmt/core.h>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "io/quantize_checkpoint.hpp"

namespace mxmoe::cli {

namespace {
struct QuantizeArgs {
  std::string in, out, rule = "round_up";
  bool force = false;
};
}  // namespace

void add_quantize(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand(
      "quantize",
      "Convert a BF16/F32 expert checkpoint (Mixtral, Qwen3-MoE, DeepSeek naming) to MXFP4 in "
      "the gpt-oss layout (MoE tensors only), with a config.json mxmoe loads back");
  auto args = std::make_shared<QuantizeArgs>();
  sub->add_option("--model", args->in, "Input checkpoint directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("--out", args->out, "Output directory (refused if it exists, unless --force)")
      ->required();
  sub->add_option("--scale-rule", args->rule,
                  "E8M0 scale rule: round_up (never clips; default) or floor (OCP)")
      ->check(CLI::IsMember({"floor", "round_up"}));
  sub->add_flag("--force", args->force, "Write into an existing output directory");
  sub->callback([&action, args] {
    action = [args] {
      io::QuantizeOptions options;
      options.scale_rule = args->rule == "floor" ? ScaleRule::floor : ScaleRule::round_up;
      options.force = args->force;
      options.progress = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
      io::quantize_checkpoint(args->in, args->out, options);
      fmt::print(stderr, "quantize: wrote {}\n", args->out);
      return kExitOk;
    };
  });
}

}  // namespace mxmoe::cli
