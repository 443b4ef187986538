// The chat formats (see chat.hpp), written from their published descriptions: OpenAI's
// harmony response format, Qwen's ChatML template, Mistral's [INST] template for Mixtral.
#include "text/chat.hpp"

#include <fmt/core.h>

#include <stdexcept>

#include "base/printable.hpp"

namespace mxmoe::text {
namespace {

// A role as an error shows it: escaped (a NUL would cut the message where it is read as a C
// string; a control byte would reach a terminal) and at most 64 bytes of it.
std::string role_shown(const std::string& role) {
  return printable(std::string_view(role).substr(0, 64)) + (role.size() > 64 ? "..." : "");
}

[[noreturn]] void bad_role(ChatFormat format, std::size_t k, const ChatMessage& m, const char* roles) {
  throw std::invalid_argument(fmt::format("chat message {}: role \"{}\" has no place in the {} format ({})",
                                          k, role_shown(m.role), to_string(format), roles));
}

// Harmony: <|start|>ROLE<|message|>CONTENT<|end|>; an assistant's reply is on the final
// channel (earlier analysis is not shown to the model again, as the format advises).
std::string harmony(std::span<const ChatMessage> messages, const ChatOptions& o) {
  std::string out;
  for (std::size_t k = 0; k < messages.size(); ++k) {
    const ChatMessage& m = messages[k];
    if (m.role == "assistant")
      out += "<|start|>assistant<|channel|>final<|message|>" + m.content + "<|end|>";
    else if (m.role == "system" || m.role == "developer" || m.role == "user")
      out += "<|start|>" + m.role + "<|message|>" + m.content + "<|end|>";
    else
      bad_role(ChatFormat::harmony, k, m, "system, developer, user, assistant");
  }
  if (o.add_generation_prompt) out += "<|start|>assistant";
  return out;
}

std::string chatml(std::span<const ChatMessage> messages, const ChatOptions& o) {
  std::string out;
  for (std::size_t k = 0; k < messages.size(); ++k) {
    const ChatMessage& m = messages[k];
    if (m.role != "system" && m.role != "user" && m.role != "assistant")
      bad_role(ChatFormat::chatml, k, m, "system, user, assistant");
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  if (o.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (!o.enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

// <s>[INST] USER [/INST]ASSISTANT</s>[INST] ... ; a leading system message is put before the
// first user message, separated by a blank line (Mixtral's template has no system role).
std::string mistral_inst(std::span<const ChatMessage> messages) {
  std::string out = "<s>";
  std::string system;
  std::size_t k = 0;
  if (!messages.empty() && messages[0].role == "system") system = messages[k++].content + "\n\n";
  for (bool user_turn = true; k < messages.size(); ++k, user_turn = !user_turn) {
    const ChatMessage& m = messages[k];
    if (m.role != (user_turn ? "user" : "assistant"))
      throw std::invalid_argument(fmt::format(
          "chat message {}: role \"{}\" where the mistral_inst format needs \"{}\" (a leading "
          "system message, then user and assistant in turn)",
          k, role_shown(m.role), user_turn ? "user" : "assistant"));
    if (user_turn) {
      out += "[INST] " + system + m.content + " [/INST]";
      system.clear();
    } else {
      out += m.content + "</s>";
    }
  }
  // The system message goes before the first user message: without one it would be dropped.
  if (!system.empty())  // never written (it holds at least its "\n\n")
    throw std::invalid_argument(
        "chat message 0: a system message alone: the mistral_inst format writes it before the "
        "first user message, and there is none");
  return out;
}

}  // namespace

ChatFormat chat_format_for(std::string_view model_type) {
  if (model_type == "gpt_oss") return ChatFormat::harmony;
  if (model_type == "qwen3_moe" || model_type == "qwen2_moe" || model_type == "qwen3") return ChatFormat::chatml;
  if (model_type == "mixtral") return ChatFormat::mistral_inst;
  throw std::invalid_argument(fmt::format(
      "no chat format for model_type \"{}\" (mxmoe knows gpt_oss, qwen3_moe, mixtral)", model_type));
}

const char* to_string(ChatFormat format) {
  switch (format) {
    case ChatFormat::harmony: return "harmony";
    case ChatFormat::chatml: return "chatml";
    case ChatFormat::mistral_inst: return "mistral_inst";
  }
  return "?";
}

std::string render_chat(ChatFormat format, std::span<const ChatMessage> messages, const ChatOptions& options) {
  switch (format) {
    case ChatFormat::harmony: return harmony(messages, options);
    case ChatFormat::chatml: return chatml(messages, options);
    case ChatFormat::mistral_inst: return mistral_inst(messages);
  }
  throw std::invalid_argument("unknown chat format");
}

}  // namespace mxmoe::text
