// Text for whole models: a checkpoint's Hugging Face tokenizer (tokenizer.json) read and run by
// mxmoe, a decoder for tokens as they are generated, and the families' chat formats.
// LanguageModel (llm.hpp) speaks token ids; this is how an engine turns text into them and
// back. What is supported (byte-level and Metaspace BPE, as gpt-oss, Qwen3 and Mixtral
// publish them) and how it is tested against the tokenizers library: docs/TOKENIZERS.md.
//
// Threads: a Tokenizer is immutable once loaded; its const members may be called from several
// threads at once. A TextStream is one thread's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/export.h"

namespace mxmoe {

// A well-formed tokenizer.json that uses a model, normalizer, pre-tokenizer or decoder mxmoe
// does not implement; the message names it. Not a LoadError: nothing is wrong with the file,
// and a caller given token ids can go on without text.
class MXMOE_API UnsupportedTokenizer : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class MXMOE_API Tokenizer {
 public:
  // Reads PATH_OR_DIR (a tokenizer.json, or a checkpoint directory holding one). Throws
  // LoadError (a missing, unreadable or malformed file, naming it and the field) or
  // UnsupportedTokenizer.
  static Tokenizer load(const std::string& path_or_dir);

  // The ids of TEXT, as the tokenizers library's encode(text, add_special_tokens=False): no
  // BOS is added (the chat format writes it). With PARSE_SPECIAL, special tokens written in
  // the text ("<|start|>") become their ids; without, they are ordinary text. Text that is
  // not UTF-8 throws std::invalid_argument naming the byte offset.
  std::vector<std::int32_t> encode(std::string_view text, bool parse_special = true) const;

  // The text of IDS, as the library's decode(ids, skip_special_tokens): SKIP_SPECIAL leaves
  // special tokens out; ids that are no token (a model's vocabulary padding, negative ids)
  // are skipped. Bytes that are not UTF-8 become U+FFFD.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special) const;

  // Whether ID is a token (of the vocabulary or an added token).
  bool contains(std::int32_t id) const;
  // One more than the highest token id. A model's embedding may have more rows.
  std::int32_t vocab_size() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;  // shared with copies and with TextStreams
  friend class TextStream;
};

// Decodes tokens one at a time as a model makes them: push(id) returns the text that is now
// complete, never half a UTF-8 character (a character split over byte tokens waits for its
// last byte). The pieces and finish() concatenate to Tokenizer::decode of all the ids (see
// docs/TOKENIZERS.md for the one case of invalid bytes where they differ). Ids that are no
// token are skipped. Keeps the tokenizer alive.
class MXMOE_API TextStream {
 public:
  explicit TextStream(const Tokenizer& tokenizer, bool skip_special = true);
  ~TextStream();
  TextStream(TextStream&&) noexcept;
  TextStream& operator=(TextStream&&) noexcept;

  std::string push(std::int32_t id);
  // What is still held (an incomplete character, as U+FFFD); the stream starts over.
  std::string finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct MXMOE_API ChatMessage {
  std::string role;  // "system", "developer" (gpt-oss's harmony), "user", "assistant"
  std::string content;
};

// MESSAGES as the text the family MODEL_TYPE (config.json's model_type, LanguageModel::family():
// "gpt_oss" harmony, "qwen3_moe" ChatML, "mixtral" [INST]) was trained on, for
// Tokenizer::encode with special tokens parsed. ADD_GENERATION_PROMPT ends with the start of
// the assistant's turn; ENABLE_THINKING=false writes Qwen3's empty thinking block (ChatML
// only). std::invalid_argument names an unknown model type, a role the format has no place
// for, or ([INST]) turns that do not alternate.
MXMOE_API std::string render_chat(std::string_view model_type,
                                  const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt = true, bool enable_thinking = true);

}  // namespace mxmoe
