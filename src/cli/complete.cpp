// `mxmoe complete`: a whole model from its checkpoint directory, prompts in, new tokens out,
// in llama.cpp's and vLLM's habits. Several prompts run as one batch. With --json, one
// document: {"model", "prompts": [{"prompt_tokens", "tokens", "finish_reason"}], "timing"}.
#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "base/printable.hpp"
#include "cli/common.hpp"
#include "mxmoe/llm.hpp"
#include "mxmoe/runtime.hpp"

namespace mxmoe::cli {
namespace {

struct CompleteOptions {
  std::string model;
  std::vector<std::string> prompt_ids;  // each "5,17,42"
  int max_tokens = 16;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  std::uint64_t seed = 0;
  int max_context = 0;  // 0: prompt + max_tokens, rounded up
  bool ignore_eos = false;
  bool json = false;
  bool verbose = false;
  RequestOptions request;
  HardwareOptions hardware;
};

// "5,17,42" -> ids (UsageError naming the flag for anything else).
std::vector<std::int32_t> parse_ids(const std::string& text, std::size_t index) {
  std::vector<std::int32_t> ids;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    errno = 0;
    const long long v = item.empty() ? -1 : std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno != 0 || v < 0 || v > INT32_MAX)
      throw UsageError(fmt::format(
          "--prompt-ids #{}: '{}' is not a token id (a comma list of integers >= 0: 5,17,42)",
          index + 1, printable(item)));
    ids.push_back(static_cast<std::int32_t>(v));
    at = comma + 1;
  }
  return ids;
}

int run_complete(CLI::App& app, const CompleteOptions& o) {
  if (o.prompt_ids.empty()) throw UsageError("complete: give a prompt (--prompt-ids 5,17,42)");
  std::vector<std::vector<std::int32_t>> prompts;
  for (std::size_t i = 0; i < o.prompt_ids.size(); ++i) prompts.push_back(parse_ids(o.prompt_ids[i], i));
  std::size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());

  const Request request = o.request.resolve(app);
  const Hardware hardware = o.hardware.resolve();
  Runtime runtime(request.threads);
  LlmOptions options;
  options.request = request;
  options.max_batch = static_cast<int>(prompts.size());
  options.max_context =
      o.max_context > 0 ? o.max_context : static_cast<int>(longest) + o.max_tokens;
  options.memory_limit = available_memory_bytes();
  const bool progress = !o.json || o.verbose;
  options.progress = [progress](const std::string& line) {
    if (progress) fmt::print(stderr, "{}\n", line);
  };
  const auto t0 = std::chrono::steady_clock::now();
  LanguageModel model(o.model, hardware, runtime, options);
  const auto t1 = std::chrono::steady_clock::now();
  if (o.verbose) fmt::print(stderr, "{}", model.describe());

  SamplingParams params;
  params.max_tokens = o.max_tokens;
  params.temperature = o.temperature;
  params.top_k = o.top_k;
  params.top_p = o.top_p;
  params.min_p = o.min_p;
  params.seed = o.seed;
  params.ignore_eos = o.ignore_eos;
  StopOnSignal stop;
  std::vector<Completion> done;
  try {
    done = model.generate(prompts, params, {}, [] { return StopOnSignal::stop_requested(); });
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());  // the prompts and limits are the command line's
  }
  const auto t2 = std::chrono::steady_clock::now();
  const double load_s = std::chrono::duration<double>(t1 - t0).count();
  const double gen_s = std::chrono::duration<double>(t2 - t1).count();
  std::size_t new_tokens = 0;
  for (const auto& c : done) new_tokens += c.tokens.size();

  if (o.json) {
    nlohmann::ordered_json j;
    j["model"] = printable(o.model);
    j["family"] = model.family();
    auto& list = j["prompts"] = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < done.size(); ++i)
      list.push_back({{"prompt_tokens", prompts[i]},
                      {"tokens", done[i].tokens},
                      {"text", nullptr},
                      {"finish_reason", done[i].finish_reason}});
    if (done.size() == 1) {
      j["tokens"] = done[0].tokens;
      j["text"] = nullptr;
    }
    j["timing"] = {{"load_s", load_s}, {"generate_s", gen_s}, {"new_tokens", new_tokens}};
    fmt::print("{}\n", j.dump(2));
  } else {
    for (std::size_t i = 0; i < done.size(); ++i) {
      std::string ids;
      for (std::size_t t = 0; t < done[i].tokens.size(); ++t)
        ids += (t ? "," : "") + std::to_string(done[i].tokens[t]);
      fmt::print("{}{} ({})\n", done.size() > 1 ? fmt::format("[{}] ", i) : "", ids,
                 done[i].finish_reason);
    }
    fmt::print(stderr, "load {:.2f} s, {} new tokens in {:.2f} s\n", load_s, new_tokens, gen_s);
  }
  return StopOnSignal::stop_requested() ? kExitInterrupted : kExitOk;
}

}  // namespace

void add_complete(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand(
      "complete",
      "Complete prompts with a whole model (gpt-oss, Qwen3-MoE, Mixtral) from its checkpoint.\n"
      "  mxmoe complete --model DIR --prompt-ids 5,17,42 --max-tokens 32\n"
      "Several --prompt-ids run as one batch; --json prints the new token ids per prompt.");
  auto o = std::make_shared<CompleteOptions>();
  sub->add_option("--model", o->model, "Checkpoint directory (config.json + safetensors)")
      ->required();
  sub->add_option("--prompt-ids", o->prompt_ids,
                  "A prompt as token ids, comma-separated (repeat for a batch)");
  sub->add_option("--max-tokens", o->max_tokens, "New tokens per prompt, 1..1048576")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--temperature", o->temperature, "Sampling temperature; 0 = greedy (default)")
      ->check(finite_in(0, 10000));
  sub->add_option("--top-k", o->top_k, "Keep the K most likely tokens (0 = all)")
      ->check(CLI::Range(0, 1 << 24));
  sub->add_option("--top-p", o->top_p, "Keep the smallest set of tokens with this mass, (0, 1]")
      ->check(finite_in(1e-9, 1));
  sub->add_option("--min-p", o->min_p, "Drop tokens below MIN_P x the best one's probability")
      ->check(finite_in(0, 1));
  sub->add_option("--seed", o->seed, "Seed of the sampler: the same seed gives the same tokens");
  sub->add_option("--max-context", o->max_context,
                  "Tokens per sequence, prompt and answer (default: the longest prompt + "
                  "--max-tokens); the KV cache is allocated for it")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_flag("--ignore-eos", o->ignore_eos, "Generate --max-tokens even past a stop token");
  sub->add_flag("--json", o->json, "Print one JSON document");
  sub->add_flag("--verbose", o->verbose, "Print what each layer runs on (stderr)");
  o->request.add(*sub, false);
  o->hardware.add(*sub);
  sub->callback([&action, o, sub] { action = [o, sub] { return run_complete(*sub, *o); }; });
}

}  // namespace mxmoe::cli
