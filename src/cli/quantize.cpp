// `mxmoe quantize --model IN --out OUT [--scale-rule floor|round_up] [--force]`. Transactional
// (produce/quantize_checkpoint.hpp): Ctrl-C or a failure leaves OUT as it was.
#include <fmt/core.h>

#include <cstdio>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "produce/quantize_checkpoint.hpp"

namespace mxmoe::cli {

namespace {

struct QuantizeArgs {
  std::string in, out, rule = "round_up";
  bool force = false;
};

int quantize(const QuantizeArgs& args) {
  check_output("--out", args.out,
               CommandInputs().checkpoint("--model", args.in).current_directory(),
               /*directory=*/true);
  produce::QuantizeOptions options;
  options.scale_rule = args.rule == "floor" ? ScaleRule::floor : ScaleRule::round_up;
  options.force = args.force;
  // Progress is best effort: a full or closed stderr never stops the conversion.
  options.progress = [](const std::string& line) {
    cli::print(stderr, "{}\n", line);
    std::fflush(stderr);
  };
  const StopOnSignal stop;
  options.cancelled = &StopOnSignal::stop_requested;
  try {
    produce::quantize_checkpoint(args.in, args.out, options);
  } catch (const produce::QuantizeCancelled& e) {
    cli::print(stderr, "mxmoe: {} (signal {})\n", e.what(), StopOnSignal::signal());
    return kExitInterrupted;
  }
  cli::print(stderr, "quantize: wrote {}\n", args.out);
  return kExitOk;
}

}  // namespace

void add_quantize(CLI::App& app, Action& action) {
  const auto [sub, args] = add_command<QuantizeArgs>(
      app, action, "quantize",
      "Convert a BF16/F32 expert checkpoint (Mixtral, Qwen3-MoE, DeepSeek naming) to a complete "
      "MXFP4 model: the routed experts quantized into the gpt-oss layout (DeepSeek-V4: its own "
      "naming), every other tensor (attention, norms, embeddings, head, dense MLPs, routers, "
      "shared experts) and every other file (tokenizer, generation config, chat template) "
      "copied unchanged, config.json with its quantization_config. Streams (about one layer in "
      "memory), shards per layer, writes a temporary directory beside OUT and renames it into "
      "place when complete; Ctrl-C leaves OUT as it was (exit 130)",
      quantize);
  sub->add_option("--model", args->in, "Input checkpoint directory")->required();
  sub->add_option("--out", args->out, "Output directory (refused if it exists, unless --force)")
      ->required();
  sub->add_option("--scale-rule", args->rule,
                  "E8M0 scale rule: round_up (never clips; default) or floor (OCP)")
      ->check(CLI::IsMember({"floor", "round_up"}));
  sub->add_flag("--force", args->force,
                "Replace an existing output directory as a whole (nothing of it survives; on "
                "failure or Ctrl-C it is kept as it was): only a checkpoint mxmoe wrote or an "
                "empty directory");
}

}  // namespace mxmoe::cli
