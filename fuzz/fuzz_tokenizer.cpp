// libFuzzer: tokenizer.json documents (a checkpoint's file, untrusted) and the text encoded
// with them. The input is the document, then optionally a 0 byte and a text. A document must
// load or raise LoadError / UnsupportedTokenizer; a loaded tokenizer must encode the text or
// refuse it as not UTF-8 (std::invalid_argument) or, when the file's own pre-tokenizer regex
// exceeds PCRE2's match limit on it, say so (std::runtime_error naming the regex); its ids
// must be tokens, and decode at once and streamed, with and without special tokens.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "mxmoe/errors.hpp"
#include "text/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t cut = input.find('\0');
  const std::string_view doc = input.substr(0, cut);
  const std::string_view text =
      cut == std::string_view::npos ? std::string_view("Hello <s>ab wörld 😀") : input.substr(cut + 1);
  using mxmoe::text::Tokenizer;
  std::optional<Tokenizer> t;
  try {
    t.emplace(Tokenizer::from_json(doc, "fuzz.json"));
  } catch (const mxmoe::LoadError&) {
    return 0;
  } catch (const mxmoe::UnsupportedTokenizer&) {
    return 0;
  }
  for (const bool special : {true, false}) {
    std::vector<mxmoe::text::TokenId> ids;
    try {
      ids = t->encode(text, special);
    } catch (const std::invalid_argument&) {
      return 0;  // not UTF-8: the same for both settings
    } catch (const std::runtime_error&) {
      return 0;  // the file's regex past PCRE2's match limit on this text
    }
    for (const mxmoe::text::TokenId id : ids)
      if (!t->contains(id)) std::abort();
    for (const bool skip : {false, true}) {
      (void)t->decode(ids, skip);
      mxmoe::text::StreamDecoder stream(*t, skip);
      for (const mxmoe::text::TokenId id : ids) (void)stream.push(id);
      (void)stream.finish();
    }
  }
  return 0;
}
