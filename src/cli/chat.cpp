// `mxmoe chat`: a conversation with a whole model, streamed as it is generated. Each line read
// from stdin is a user turn; the conversation is rendered in the family's chat format
// (src/text/chat.hpp: harmony, ChatML, [INST]) and completed. Ctrl-C stops the answer, not the
// program; Ctrl-D (end of input) or /quit ends it; /reset forgets the conversation.
#include <fmt/core.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "base/printable.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/llm_common.hpp"
#include "text/chat.hpp"

namespace mxmoe::cli {
namespace {

struct ChatCommandOptions {
  GenerationFlags gen;
  std::string system;
  bool thinking = true;
};

int run_chat(const ChatCommandOptions& o, CLI::App& app) {
  const Tokenizer tokenizer = *open_tokenizer(o.gen.model, true);
  const Request request = o.gen.request.resolve(app);
  Runtime runtime(request.threads);
  const int context = o.gen.max_context > 0 ? o.gen.max_context : 4096;
  auto model = open_model(app, o.gen, runtime, 1, context, false);
  const SamplingParams params = o.gen.sampling;

  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  print(stderr, "mxmoe chat: {} ({} format), context {} tokens. Ctrl-C stops an answer; "
                     "/reset forgets the conversation; /quit or Ctrl-D ends.\n",
             model->family(), text::to_string(text::chat_format_for(model->family())), context);
  std::string line;
  for (;;) {
    print("> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      messages.resize(o.system.empty() ? 0 : 1);
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({"user", line});
    std::vector<std::int32_t> ids;
    try {
      ids = tokenizer.encode(render_chat(model->family(), messages, true, o.thinking), true);
    } catch (const std::invalid_argument& e) {  // the line is not UTF-8
      print(stderr, "mxmoe chat: {}\n", e.what());
      messages.pop_back();
      continue;
    }
    if (static_cast<std::int64_t>(ids.size()) + params.max_tokens > context) {
      print(stderr,
                 "mxmoe chat: the conversation ({} tokens) and an answer of --max-tokens {} "
                 "exceed the context of {} tokens: /reset, or start with a larger --max-context\n",
                 ids.size(), params.max_tokens, context);
      messages.pop_back();
      continue;
    }
    StopOnSignal stop;  // Ctrl-C from here on ends this answer only
    TextStream stream(tokenizer, true);
    const auto done = model->generate(
        {ids}, params,
        [&](std::size_t, std::int32_t token) {
          print("{}", stream.push(token));
          std::fflush(stdout);
          return !StopOnSignal::stop_requested();
        },
        [] { return StopOnSignal::stop_requested(); });
    print("{}\n", stream.finish());
    if (StopOnSignal::signal() == SIGTERM) return kExitInterrupted;
    if (StopOnSignal::stop_requested()) print(stderr, "[stopped]\n");
    std::vector<std::int32_t> answer = done[0].tokens;
    if (done[0].finish_reason == "stop" && !answer.empty()) answer.pop_back();  // the stop token
    messages.push_back({"assistant", tokenizer.decode(answer, true)});
  }
  print("\n");
  return kExitOk;
}

}  // namespace

void add_chat(CLI::App& app, Action& action) {
  const auto [sub, o] = add_command<ChatCommandOptions>(
      app, action, "chat", "Talk with a whole model, streamed (Ctrl-C stops an answer)", run_chat);
  o->gen.sampling.max_tokens = 512;
  o->gen.add(*sub, "The longest answer in tokens (default 512)");
  sub->add_option("--max-context", o->gen.max_context,
                  "Tokens of the whole conversation (default 4096); the KV cache is allocated for it")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--system", o->system, "A system message that opens the conversation");
  sub->add_flag("!--no-thinking", o->thinking,
                "Qwen3: write the empty thinking block, as enable_thinking=False does");
  sub->footer(
      "Each line you type is one user turn, in the model's chat format (gpt-oss: harmony; "
      "Qwen3-MoE: ChatML; Mixtral: [INST]). The answer streams as it is generated; Ctrl-C stops "
      "it and you can type again. /reset forgets the conversation; /quit or Ctrl-D ends.\n"
      "Examples:\n"
      "  mxmoe chat --model /tmp/gpt-oss-20b\n"
      "  mxmoe chat --model /tmp/qwen3-tiny --temperature 0.7 --top-p 0.9 --seed 1\n"
      "  echo 'Hello' | mxmoe chat --model DIR --max-tokens 32");
}

}  // namespace mxmoe::cli
