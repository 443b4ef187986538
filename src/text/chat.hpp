// The chat formats of the supported families: a conversation rendered as the text the model
// was trained on, ready for Tokenizer::encode (with special-token parsing). gpt-oss: OpenAI's
// harmony; Qwen3-MoE: ChatML; Mixtral: [INST] ... [/INST] after the BOS. What each supports is
// in docs/TOKENIZERS.md.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "mxmoe/tokenizer.hpp"

namespace mxmoe::text {

// {role, content}: "system", "developer" (harmony), "user", "assistant".
using ChatMessage = mxmoe::ChatMessage;

enum class ChatFormat { harmony, chatml, mistral_inst };

struct ChatOptions {
  // End with the start of the assistant's turn (<|start|>assistant, <|im_start|>assistant\n).
  bool add_generation_prompt = true;
  // ChatML (Qwen3) only: false writes the empty thinking block "<think>\n\n</think>\n\n" after
  // the generation prompt, as Qwen3's template does with enable_thinking=False.
  bool enable_thinking = true;
};

// The format of config.json's model_type: "gpt_oss" -> harmony, "qwen3_moe" (and "qwen2_moe",
// "qwen3") -> chatml, "mixtral" -> mistral_inst; std::invalid_argument naming any other.
ChatFormat chat_format_for(std::string_view model_type);

const char* to_string(ChatFormat format);

// MESSAGES in FORMAT. A role the format has no place for, or (mistral_inst) turns that do not
// alternate user/assistant, throw std::invalid_argument naming the message.
std::string render_chat(ChatFormat format, std::span<const ChatMessage> messages,
                        const ChatOptions& options = {});

}  // namespace mxmoe::text
