// The whole-model commands' shared flags and loading (llm_common.hpp).
#include "cli/llm_common.hpp"

#include <fmt/core.h>

#include <charconv>

#include "base/printable.hpp"
#include "mxmoe/errors.hpp"

namespace mxmoe::cli {

std::vector<std::int32_t> parse_token_ids(const std::string& list, const std::string& flag) {
  std::vector<std::int32_t> ids;
  std::size_t i = 0;
  while (i <= list.size()) {
    std::size_t end = list.find(',', i);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(i, end - i);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    std::int32_t id = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || id < 0)
      throw UsageError(fmt::format("{}: '{}' is not a token id (a list such as 5,17,42)", flag,
                                   printable(item)));
    ids.push_back(id);
    i = end + 1;
  }
  return ids;
}

CLI::Option* add_compact_flag(CLI::App& app, std::string& value) {
  return app
      .add_flag("--compact{int8}", value,
                "Compact mode: the non-expert matrices (attention, the LM head) quantized at "
                "load, --compact or --compact=int8 to 8 bits per 32-block (about half their "
                "bytes), --compact=int4 to 4 bits (a quarter, for a 16x coarser step); the MoE "
                "layers take int8 activations unless --activation says otherwise (accuracy of "
                "each in docs/ACCURACY.md)")
      ->check(CLI::IsMember({"int8", "int4"}));
}

CompactFormat compact_format(const std::string& value) {
  return value.empty() ? CompactFormat::off : parse_compact_format(value);
}

void GenerationFlags::add(CLI::App& app, const std::string& max_tokens_help) {
  app.add_option("--model", model, "Checkpoint directory (config.json, safetensors, tokenizer.json)")
      ->required();
  app.add_option("--max-tokens", sampling.max_tokens, max_tokens_help)
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--temperature", sampling.temperature, "Sampling temperature; 0 = greedy")
      ->check(finite_in(0, 10000));
  app.add_option("--top-k", sampling.top_k, "Keep the K most likely tokens (0 = all)")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--top-p", sampling.top_p,
                 "Keep the smallest set of tokens with this mass, (0, 1]")
      ->check(finite_in(1e-9, 1));
  app.add_option("--min-p", sampling.min_p, "Drop tokens below MIN_P x the best one's probability")
      ->check(finite_in(0, 1));
  app.add_option("--seed", sampling.seed,
                 "Seed of the sampler: the same seed gives the same tokens");
  app.add_flag("--ignore-eos", sampling.ignore_eos, "Generate --max-tokens even past a stop token");
  add_compact_flag(app, compact);
  request.add(app, false);
  hardware.add(app);
}

std::unique_ptr<LanguageModel> open_model(CLI::App& app, const GenerationFlags& flags,
                                          Runtime& runtime, int max_batch, int context,
                                          bool quiet) {
  LlmOptions options;
  options.request = flags.request.resolve(app);
  options.max_batch = max_batch;
  options.max_context = context;
  options.compact = compact_format(flags.compact);
  options.prefill_chunk = flags.prefill_chunk;
  options.memory_limit = available_memory_bytes();
  if (!quiet) options.progress = [](const std::string& line) { print(stderr, "{}\n", line); };
  try {
    return std::make_unique<LanguageModel>(flags.model, flags.hardware.resolve(), runtime,
                                           std::move(options));
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());  // --max-context or --max-batch out of the model's range
  }
}

std::optional<Tokenizer> open_tokenizer(const std::string& model, bool required) {
  try {
    return Tokenizer::load(model);
  } catch (const UnsupportedTokenizer& e) {  // the message names the file
    if (required) throw LoadError(e.what());
    print(stderr, "mxmoe: note: {}; token ids are printed without text\n", printable(e.what()));
  } catch (const std::exception& e) {
    if (required) throw;
    print(stderr, "mxmoe: note: no usable tokenizer ({}); token ids are printed without text\n",
               e.what());
  }
  return std::nullopt;
}

}  // namespace mxmoe::cli
