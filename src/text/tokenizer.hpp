// A Hugging Face tokenizer (a `tokenizer.json` of the tokenizers library) read and run by
// mxmoe: text to token ids and back, for the whole-model commands. The pipeline is the
// library's own, one stage at a time: added tokens split out first, then the normalizer,
// the pre-tokenizer, the BPE model; the decoder on the way back. What is supported and what is
// refused is in docs/TOKENIZERS.md; a file using anything else throws UnsupportedTokenizer
// (naming it), so a caller given token ids can warn once and go on.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/tokenizer.hpp"

namespace mxmoe::text {

using TokenId = std::int32_t;

// A well-formed tokenizer.json using a model, normalizer, pre-tokenizer or decoder mxmoe does
// not implement ("model type \"Unigram\""); declared in the public header (mxmoe/tokenizer.hpp,
// this room's edge to engines and the Python package).
using UnsupportedTokenizer = mxmoe::UnsupportedTokenizer;

// PATH_OR_DIR/tokenizer.json when PATH_OR_DIR is a directory (a checkpoint), else the path.
std::string tokenizer_file(const std::string& path_or_dir);

class Tokenizer {
 public:
  // Reads PATH (a tokenizer.json). A malformed file is a LoadError naming the path and the
  // field; a feature mxmoe does not implement is UnsupportedTokenizer.
  static Tokenizer from_file(const std::string& path);
  // The same from the document's text; WHAT names it in messages.
  static Tokenizer from_json(std::string_view json_text, std::string_view what);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The ids of TEXT (UTF-8; invalid UTF-8 throws std::invalid_argument naming the byte
  // offset). With parse_special, the special added tokens written in TEXT ("<|im_start|>")
  // become their ids; without, they are ordinary text. As the tokenizers library's
  // encode(text, add_special_tokens=False): no post-processor (BOS comes from the chat format).
  std::vector<TokenId> encode(std::string_view text, bool parse_special = true) const;

  // The text of IDS, as the tokenizers library's decode(ids, skip_special_tokens). An id
  // that is no token throws std::out_of_range naming it. Bytes that are not UTF-8 become
  // U+FFFD as the library writes them.
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;

  // One more than the highest id of the vocabulary and the added tokens.
  TokenId vocab_size() const;
  // The id of a token written as in the file (an added token's content, a vocabulary key).
  std::optional<TokenId> token_id(std::string_view token) const;
  // Whether ID is a token of this tokenizer. A model's vocabulary can be larger (gpt-oss's
  // embedding has 201088 rows for 200019 tokens): the ids between are no text at all.
  bool contains(TokenId id) const;
  // Whether ID is an added token marked special.
  bool is_special(TokenId id) const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class StreamDecoder;
};

// Decodes ids one at a time as a model makes them: push(id) returns the text that is now
// complete, never half a UTF-8 character (a character split over byte tokens is held until
// its last byte comes). The concatenation of every push and finish() equals
// decode(all ids), except where byte tokens that are not UTF-8 follow a complete character
// made of byte tokens: decode replaces that whole group byte by byte, the stream has already
// written the character. Holds a reference to the tokenizer, which must outlive it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  std::string push(TokenId id);
  // What is still held (an incomplete character, as U+FFFD), and starts over.
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<TokenId> context_;      // ids already emitted, decoded again for their context
  std::vector<std::size_t> batches_;  // context_ as the batches of ids emitted together
  std::vector<TokenId> pending_;      // ids whose text is not emitted yet
};

}  // namespace mxmoe::text
