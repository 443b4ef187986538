// `mxmoe synth` (formerly `mxmoe generate`, still an alias): a checkpoint of random MXFP4 MoE layers with a preset's shape (optionally
// resized), in the gpt-oss layout with the family's config.json (DeepSeek-V4: its release
// naming and config, hash layers optional), or with --full the whole published model (every
// tensor, a tokenizer, the configs) for transformers: something to try the library, the C API,
// the Python package and whole models on without downloading one.
#include "mxmoe/generate.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "cli/command.hpp"
#include "cli/common.hpp"

namespace mxmoe::cli {
namespace {

struct GenerateFlags {
  std::string preset = "gpt-oss-20b";
  std::string out;
  int experts = 0, top_k = 0, hidden = 0, intermediate = 0;  // 0: the preset's
  // The flags that are GenerateOptions' fields (layers, hash_layers, vocab, seed, force, full,
  // attention_heads, kv_heads, head_dim), with its defaults.
  mxmoe::GenerateOptions generate;
};

int generate(const GenerateFlags& o) {
  check_output("--out", o.out, CommandInputs().current_directory(), /*directory=*/true);
  const LayerSpec spec = resize(preset(o.preset), {o.experts, o.top_k, o.hidden, o.intermediate});
  mxmoe::GenerateOptions g = o.generate;
  // Progress is best effort: a full or closed stderr never stops the writing.
  g.progress = [](const std::string& line) {
    cli::print(stderr, "{}\n", line);
    std::fflush(stderr);
  };
  const StopOnSignal stop;  // from here on Ctrl-C deletes what was written and exits 130
  g.cancelled = &StopOnSignal::stop_requested;
  // The exact bytes of the tensors (the index's total_size), announced before any is written.
  const std::uint64_t bytes = generated_tensor_bytes(spec, g);
  g.progress(fmt::format(
      "mxmoe synth: {} {} (E={}, top-{}, H={}, I={}): {} of tensors",
      g.full ? "the whole model of" : fmt::format("{} layer(s) of", std::max(g.layers, 1)),
      spec.name, spec.num_experts, spec.top_k, spec.hidden, spec.intermediate,
      bytes_text(static_cast<double>(bytes))));
  try {
    generate_checkpoint(o.out, spec, g);
  } catch (const GenerateCancelled& e) {
    cli::print(stderr, "mxmoe: {} (signal {})\n", e.what(), StopOnSignal::signal());
    return kExitInterrupted;
  }
  cli::print(stderr, "mxmoe synth: wrote {}\n", o.out);
  return kExitOk;
}

}  // namespace

void add_synth(CLI::App& app, Action& action) {
  const auto [sub, opts] = add_command<GenerateFlags>(
      app, action, "synth",
      "Write a checkpoint with random weights of a real model's shape, to try mxmoe without "
      "downloading a model: its MoE layers (config.json + safetensors in the gpt-oss MXFP4 "
      "layout), or with --full the whole model (every tensor of the published checkpoint, a "
      "tokenizer, the configs) that Hugging Face transformers loads",
      generate);
  // Its name until 2026-12: `generate` means text in every other tool of this field.
  sub->alias("generate");
  sub->add_option("--out", opts->out, "The checkpoint directory to write")->required();
  sub->add_option("--preset", opts->preset, "Shape and family of the layers")
      ->check(CLI::IsMember(preset_names()))
      ->capture_default_str();
  sub->add_option("--layers", opts->generate.layers,
                  "Number of layers (default 1; with --full the model's: 24 for gpt-oss-20b, 36 "
                  "for gpt-oss-120b, 48 for qwen3-30b-a3b)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--experts", opts->experts, "Override the number of routed experts")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--top-k", opts->top_k, "Override the experts per token")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--hidden", opts->hidden, "Override H (a multiple of 32)")
      ->check(CLI::Range(32, 65536));
  sub->add_option("--intermediate", opts->intermediate, "Override I (a multiple of 32)")
      ->check(CLI::Range(32, 65536));
  sub->add_option("--hash-layers", opts->generate.hash_layers,
                  "DeepSeek-V4: the first N layers are hash-routed (tid2eid by token id), as "
                  "V4-Flash's first 3")
      ->check(CLI::Range(0, 4096));
  sub->add_option("--vocab", opts->generate.vocab,
                  "DeepSeek-V4 hash layers: token ids lie in [0, VOCAB) (default 129280); with "
                  "--full: the rows of the embedding and the head (default the model's, at least "
                  "265 for gpt-oss, 259 for Qwen3: the 256 byte tokens and the special tokens)")
      ->check(CLI::Range(1, kMaxVocab));
  auto* full = sub->add_flag(
      "--full", opts->generate.full,
      "The whole model, not just its MoE layers: every tensor of the published checkpoint with "
      "its name, shape and dtype (gpt-oss: MXFP4 experts as published; qwen3-30b-a3b: BF16 "
      "per-expert weights as published, for `mxmoe quantize`), a byte-level tokenizer.json, "
      "tokenizer_config.json and generation_config.json, in shards of at most 4 GB with an index. "
      "Presets gpt-oss-20b, gpt-oss-120b, tiny and qwen3-30b-a3b");
  sub->add_option("--heads", opts->generate.attention_heads, "With --full: attention heads (default the model's)")
      ->check(CLI::Range(1, 1024))
      ->needs(full);
  sub->add_option("--kv-heads", opts->generate.kv_heads,
                  "With --full: key/value heads, dividing --heads (default the model's)")
      ->check(CLI::Range(1, 1024))
      ->needs(full);
  sub->add_option("--head-dim", opts->generate.head_dim,
                  "With --full: the size of a head, even (default the model's)")
      ->check(CLI::Range(2, 1024))
      ->needs(full);
  sub->add_option("--seed", opts->generate.seed,
                  "Seed of the random weights (layer N uses seed + N; with --full each tensor has "
                  "its own stream)")
      ->capture_default_str();
  sub->add_flag("--force", opts->generate.force,
                "Replace OUT if it exists (as a whole): only a checkpoint mxmoe wrote or an "
                "empty directory");
  sub->footer(
      "Examples:\n"
      "  mxmoe synth --preset qwen3-30b-a3b --experts 8 --hidden 256 --intermediate 128 "
      "--layers 2 --out /tmp/tiny-qwen\n"
      "  mxmoe synth --preset gpt-oss-20b --full --out /tmp/gpt-oss-20b   (13.8 GB, the "
      "published layout)\n"
      "  mxmoe synth --preset gpt-oss-20b --full --layers 2 --experts 4 --hidden 64 "
      "--intermediate 64 --heads 4 --kv-heads 2 --head-dim 16 --vocab 1000 --out /tmp/tiny-oss\n"
      "  mxmoe synth --preset qwen3-30b-a3b --full --out /tmp/qwen3 && mxmoe quantize --model "
      "/tmp/qwen3 --out /tmp/qwen3-mxfp4   (61 GB of BF16, then 17 GB)\n"
      "DeepSeek-V4 is written in its release naming (FP4 experts, FP8 shared expert): mxmoe "
      "synth --preset deepseek-v4-flash --experts 16 --hidden 256 --intermediate 128 "
      "--layers 2 --hash-layers 1 --vocab 1000 --out /tmp/tiny-v4\n"
      "The checkpoint is written beside OUT and renamed into place when complete; Ctrl-C "
      "deletes it and leaves OUT as it was (exit 130).");
}

}  // namespace mxmoe::cli
