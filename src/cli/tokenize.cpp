// `mxmoe tokenize`: a checkpoint's tokenizer.json run by mxmoe (src/text/): text to token ids
// (--prompt, --prompt-file) or ids back to text (--decode). Its ids are those of the Hugging
// Face tokenizers library's encode(text, add_special_tokens=False) (python/tests/
// test_tokenizer.py checks them), so a prompt can be checked before a model runs it.
#include <fmt/core.h>

#include <charconv>
#include <filesystem>
#include <memory>

#include "base/file.hpp"
#include "base/json.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/llm_common.hpp"
#include "text/tokenizer.hpp"
#include "text/utf8.hpp"

namespace mxmoe::cli {
namespace {

struct TokenizeOptions {
  std::string model, prompt, prompt_file, decode;
  bool json = false;
  bool no_special = false;
};

int run_tokenize(const TokenizeOptions& o) {
  const text::Tokenizer tokenizer = text::Tokenizer::from_file(text::tokenizer_file(o.model));
  if (!o.decode.empty()) {
    std::vector<text::TokenId> ids = parse_token_ids(o.decode, "--decode");
    std::string out;
    try {
      out = tokenizer.decode(ids, o.no_special);
    } catch (const std::out_of_range& e) {
      throw UsageError(fmt::format("--decode: {}", e.what()));
    }
    if (o.json)
      print("{}\n", json::Json{{"text", out}, {"count", ids.size()}}.dump());
    else
      print("{}\n", out);
    return kExitOk;
  }
  std::string prompt = o.prompt;
  if (!o.prompt_file.empty()) prompt = files::read_regular_file(o.prompt_file, std::uint64_t{1} << 30);
  std::vector<text::TokenId> ids;
  try {
    ids = tokenizer.encode(prompt, !o.no_special);
  } catch (const std::invalid_argument& e) {  // the text is not UTF-8
    if (o.prompt_file.empty()) throw UsageError(fmt::format("--prompt: {}", e.what()));
    throw std::runtime_error(fmt::format("{}: {}", o.prompt_file, e.what()));
  }
  if (o.json) {
    json::Json pieces = json::Json::array();
    for (const text::TokenId id : ids) pieces.push_back(tokenizer.decode(std::span(&id, 1)));
    print("{}\n", json::Json{{"ids", ids}, {"pieces", pieces}, {"count", ids.size()}}.dump());
  } else {
    std::string line;
    for (std::size_t k = 0; k < ids.size(); ++k) line += (k ? "," : "") + std::to_string(ids[k]);
    print("{}\n", line);
  }
  return kExitOk;
}

}  // namespace

void add_tokenize(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand(
      "tokenize", "Text to token ids, or ids to text, with a checkpoint's tokenizer.json");
  auto o = std::make_shared<TokenizeOptions>();
  sub->add_option("--model", o->model,
                  "Checkpoint directory (its tokenizer.json is read) or a tokenizer.json")
      ->required();
  auto* prompt = sub->add_option("--prompt", o->prompt, "Text to encode (UTF-8)");
  auto* file = sub->add_option("--prompt-file", o->prompt_file, "File whose text to encode (UTF-8)");
  auto* decode = sub->add_option("--decode", o->decode, "Ids to decode, comma-separated: 1,2,3");
  prompt->excludes(file)->excludes(decode);
  file->excludes(decode);
  sub->add_flag("--json", o->json,
                "Print JSON: {\"ids\", \"pieces\" (each id's text), \"count\"}, or {\"text\", "
                "\"count\"} with --decode");
  sub->add_flag("--no-special", o->no_special,
                "Encoding: special tokens written in the text (<|im_start|>) are plain text, not "
                "their ids. Decoding: special tokens are left out");
  sub->footer(
      "The ids are those of Hugging Face tokenizers' encode(text, add_special_tokens=False): no "
      "BOS is added (the chat formats write it). Supported tokenizers: BPE models (byte-level as "
      "gpt-oss and Qwen, or Metaspace with byte fallback as Mixtral); see docs/TOKENIZERS.md. "
      "Exit codes: 1 for an unreadable or unsupported tokenizer.json, 2 for a usage error (no "
      "input, an id out of range, a --prompt that is not UTF-8).\n"
      "Examples:\n"
      "  mxmoe tokenize --model /tmp/qwen3 --prompt 'Hello, world'\n"
      "  mxmoe tokenize --model /tmp/qwen3 --prompt '<|im_start|>user' --json\n"
      "  mxmoe tokenize --model /tmp/qwen3 --decode 9707,11,1879");
  sub->callback([&action, o, prompt, file, decode] {
    const bool input = prompt->count() + file->count() + decode->count() > 0;
    action = [o, input] {
      if (!input) throw UsageError("tokenize: give --prompt TEXT, --prompt-file FILE or --decode IDS");
      return run_tokenize(*o);
    };
  });
}

}  // namespace mxmoe::cli
