// `mxmoe complete`: a whole model from its checkpoint directory, prompts in, new tokens out,
// in llama.cpp's and vLLM's habits. Prompts are text (--prompt, --prompt-file: encoded with
// the model's tokenizer.json, special tokens parsed) or token ids (--prompt-ids); several run
// as one batch. With --json, one document: {"model", "family", "prompts": [{"prompt_tokens",
// "tokens", "text", "finish_reason"}], "tokens" and "text" (of a single prompt), "timing"}.
#include <fmt/core.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/file.hpp"
#include "base/printable.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/llm_common.hpp"

namespace mxmoe::cli {
namespace {

struct CompleteOptions {
  GenerationFlags gen;
  std::vector<std::string> prompts, prompt_files, prompt_ids;
  bool json = false;
  bool verbose = false;
};

int run_complete(const CompleteOptions& o, CLI::App& app) {
  if (o.prompts.empty() && o.prompt_files.empty() && o.prompt_ids.empty())
    throw UsageError("complete: give a prompt: --prompt TEXT, --prompt-file FILE or --prompt-ids 5,17,42");
  const bool text_in = !o.prompts.empty() || !o.prompt_files.empty();
  std::optional<Tokenizer> tokenizer = open_tokenizer(o.gen.model, text_in);

  std::vector<std::vector<std::int32_t>> prompts;
  auto encode = [&](const std::string& text, const std::string& what, bool file) {
    try {
      prompts.push_back(tokenizer->encode(text, true));
    } catch (const std::invalid_argument& e) {  // not UTF-8
      if (!file) throw UsageError(fmt::format("{}: {}", what, e.what()));
      throw std::runtime_error(fmt::format("{}: {}", what, e.what()));
    }
  };
  for (const std::string& p : o.prompts) encode(p, "--prompt", false);
  for (const std::string& f : o.prompt_files)
    encode(files::read_regular_file(f, std::uint64_t{1} << 30), printable(f), true);
  for (const std::string& ids : o.prompt_ids) prompts.push_back(parse_token_ids(ids, "--prompt-ids"));
  std::size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());

  const Request request = o.gen.request.resolve(app);
  Runtime runtime(request.threads);
  const int context = o.gen.max_context > 0
                          ? o.gen.max_context
                          : static_cast<int>(std::min<std::size_t>(longest + static_cast<std::size_t>(o.gen.sampling.max_tokens), 1 << 24));
  const auto t0 = std::chrono::steady_clock::now();
  auto model = open_model(app, o.gen, runtime, static_cast<int>(prompts.size()), context,
                          o.json && !o.verbose);
  const auto t1 = std::chrono::steady_clock::now();
  if (o.verbose) print(stderr, "{}", model->describe());

  StopOnSignal stop;
  std::vector<Completion> done;
  try {
    done = model->generate(prompts, o.gen.sampling, {}, [] { return StopOnSignal::stop_requested(); });
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());  // the prompts and limits are the command line's
  }
  const auto t2 = std::chrono::steady_clock::now();
  const double load_s = std::chrono::duration<double>(t1 - t0).count();
  const double gen_s = std::chrono::duration<double>(t2 - t1).count();
  std::size_t new_tokens = 0;
  for (const auto& c : done) new_tokens += c.tokens.size();
  auto text_of = [&](const std::vector<std::int32_t>& ids) -> nlohmann::ordered_json {
    if (!tokenizer) return nullptr;
    return tokenizer->decode(ids, true);
  };

  if (o.json) {
    nlohmann::ordered_json j;
    j["model"] = printable(o.gen.model);
    j["family"] = model->family();
    auto& list = j["prompts"] = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < done.size(); ++i)
      list.push_back({{"prompt_tokens", prompts[i]},
                      {"tokens", done[i].tokens},
                      {"text", text_of(done[i].tokens)},
                      {"finish_reason", done[i].finish_reason}});
    if (done.size() == 1) {
      j["tokens"] = done[0].tokens;
      j["text"] = text_of(done[0].tokens);
    }
    j["timing"] = {{"load_s", load_s}, {"generate_s", gen_s}, {"new_tokens", new_tokens}};
    // The model's text is untrusted: JSON escapes its control characters.
    print("{}\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  } else {
    for (std::size_t i = 0; i < done.size(); ++i) {
      const std::string head = done.size() > 1 ? fmt::format("[{}] ", i) : "";
      if (tokenizer) {
        print("{}{}\n", head, tokenizer->decode(done[i].tokens, true));
      } else {
        std::string ids;
        for (std::size_t t = 0; t < done[i].tokens.size(); ++t)
          ids += (t ? "," : "") + std::to_string(done[i].tokens[t]);
        print("{}{}\n", head, ids);
      }
    }
    print(stderr, "load {:.2f} s; {} new tokens in {:.2f} s ({})\n", load_s, new_tokens,
               gen_s, done.empty() ? "" : done[0].finish_reason);
  }
  return StopOnSignal::stop_requested() ? kExitInterrupted : kExitOk;
}

}  // namespace

void add_complete(CLI::App& app, Action& action) {
  const auto [sub, o] = add_command<CompleteOptions>(
      app, action, "complete",
      "Complete prompts with a whole model (gpt-oss, Qwen3-MoE, Mixtral) from its checkpoint",
      run_complete);
  o->gen.add(*sub, "New tokens per prompt, 1..1048576");
  sub->add_option("--prompt", o->prompts,
                  "A prompt's text (UTF-8; special tokens such as <|im_start|> are parsed); "
                  "repeat for a batch");
  sub->add_option("--prompt-file", o->prompt_files, "A file holding a prompt's text; repeatable");
  sub->add_option("--prompt-ids", o->prompt_ids,
                  "A prompt as token ids, comma-separated (repeat for a batch)");
  sub->add_option("--max-context", o->gen.max_context,
                  "Tokens per sequence, prompt and answer (default: the longest prompt + "
                  "--max-tokens); the KV cache is allocated for it")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_flag("--json", o->json, "Print one JSON document (token ids and text per prompt)");
  sub->add_flag("--verbose", o->verbose, "Print what each layer runs on (stderr)");
  sub->footer(
      "Prompts are run as given: no chat format is applied (use `mxmoe chat` for a "
      "conversation). Greedy unless --temperature > 0; the same --seed gives the same tokens. "
      "With --batch-invariant, a prompt's tokens do not depend on the others in the batch.\n"
      "Examples:\n"
      "  mxmoe complete --model /tmp/gpt-oss-20b --prompt 'The capital of France is' --max-tokens 16\n"
      "  mxmoe complete --model DIR --prompt-ids 5,17,42 --prompt-ids 7,8 --json\n"
      "  mxmoe complete --model DIR --prompt-file story.txt --temperature 0.8 --top-p 0.95 --seed 1");
}

}  // namespace mxmoe::cli
