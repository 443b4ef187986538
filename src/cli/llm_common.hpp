// What the whole-model commands (complete, chat, bench --whole) share: their flags (the
// model, the context, sampling, the request), opening the model with progress on stderr and
// the memory checked first, the tokenizer (required for text, optional for ids), and token-id
// lists on the command line.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/common.hpp"
#include "mxmoe/llm.hpp"
#include "mxmoe/runtime.hpp"
#include "mxmoe/tokenizer.hpp"

namespace mxmoe::cli {

// "5,17,42" -> ids (spaces allowed around commas); UsageError naming FLAG otherwise.
std::vector<std::int32_t> parse_token_ids(const std::string& list, const std::string& flag);

// --compact[=FORMAT] on APP into VALUE: absent "", bare "int8", or the FORMAT named (int8,
// int4); and VALUE as the library's CompactFormat.
CLI::Option* add_compact_flag(CLI::App& app, std::string& value);
CompactFormat compact_format(const std::string& value);

struct GenerationFlags {
  std::string model;
  // --max-tokens, --temperature, --top-k, --top-p, --min-p, --seed, --ignore-eos
  SamplingParams sampling;
  int max_context = 0;  // 0: the command's default
  std::string compact;  // --compact[=FORMAT]: "" (off), int8 or int4
  int prefill_chunk = 256;  // prompt rows per step (serve's --prefill-chunk)
  RequestOptions request;
  HardwareOptions hardware;

  void add(CLI::App& app, const std::string& max_tokens_help);
};

// The model of FLAGS on RUNTIME for MAX_BATCH sequences of CONTEXT tokens (memory checked
// against MemAvailable first; loading lines on stderr unless quiet).
std::unique_ptr<LanguageModel> open_model(CLI::App& app, const GenerationFlags& flags,
                                          Runtime& runtime, int max_batch, int context,
                                          bool quiet);

// The model's tokenizer. REQUIRED (text in or out is asked for): a missing or unsupported
// tokenizer.json is an error naming it. Otherwise: nullopt, said once on stderr. A model's
// text is its decode(ids, true): special tokens and ids that are no token left out.
std::optional<Tokenizer> open_tokenizer(const std::string& model, bool required);

}  // namespace mxmoe::cli
