// libFuzzer: texts and token ids through three fixed tokenizers, loaded once (fuzz_tokenizer
// fuzzes the documents; this harness gives the text paths their millions of executions).
//   0: gpt-oss's stand-in (`synth --full`): o200k's Split + ByteLevel, harmony's special tokens
//      at their published ids (so ids between the merges and them are holes);
//   1: Qwen3's stand-in: NFC + Qwen2's Split + ByteLevel, ChatML's special tokens, and
//      <think> / </think> added as Qwen3 has them (not special);
//   2: Mixtral's legacy form, written here: Prepend("▁") + Replace(" ", "▁"), a BPE over
//      characters with byte fallback (<0xNN>) and "a b" merges, <unk> <s> </s>, decoded by
//      Replace + ByteFallback + Fuse + Strip.
// The input's first byte picks the tokenizer (bits 0-1, 3 is 0), whether special tokens are
// parsed (bit 2) and skipped on decode (bit 3), and whether the rest is a text (bit 4 clear)
// or token ids (bit 4 set: little-endian 16-bit values, mapped around the vocabulary so that
// negative ids, holes and ids past the end come up).
// Properties, each an abort when violated (docs/TOKENIZERS.md):
//  - text: not UTF-8 is std::invalid_argument, nothing else; encode never fails on UTF-8
//    (byte-level and byte fallback cover every character) and gives tokens only;
//  - the decode of those ids is the text (0; 2 when special tokens are not parsed and the text
//    has no "▁", which the legacy form reads as a space), the normalized text (1: decoding it
//    and encoding again gives it back), without skipped special tokens a subset;
//  - ids: decode refuses (std::out_of_range) exactly the ids that are no token, push too;
//  - streamed decode: every piece whole UTF-8; the pieces and finish() concatenate to decode
//    of all the ids, except where byte-fallback bytes that are not UTF-8 as a group follow
//    a character made of byte tokens (the documented exception: then only whole UTF-8).
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/layer_spec.hpp"
#include "produce/full_model.hpp"
#include "text/tokenizer.hpp"
#include "text/utf8.hpp"

namespace {

using mxmoe::text::StreamDecoder;
using mxmoe::text::TokenId;
using mxmoe::text::Tokenizer;
using nlohmann::json;

// mixtral_legacy's "<0x00>".."<0xFF>" are ids 3..258.
constexpr TokenId kFirstByteToken = 3;

// A violated property: says which (its line here) and stops, for libFuzzer to keep the input.
void check(bool property, int line = __builtin_LINE()) {
  if (property) return;
  std::fprintf(stderr, "fuzz_tokenizer_text.cpp:%d: property violated\n", line);
  __builtin_trap();
}

Tokenizer stand_in(const char* preset, std::initializer_list<std::pair<const char*, int>> plain_added) {
  json doc = json::parse(mxmoe::full_model(mxmoe::preset(preset), {}).tokenizer_json);
  for (const auto& [content, id] : plain_added)
    doc["added_tokens"].push_back({{"id", id},
                                   {"content", content},
                                   {"single_word", false},
                                   {"lstrip", false},
                                   {"rstrip", false},
                                   {"normalized", false},
                                   {"special", false}});
  return Tokenizer::from_json(doc.dump(), preset);
}

// Mixtral's legacy tokenizer.json in miniature: <unk> <s> </s>, the 256 byte tokens, "▁" and
// the letters, merges spelling a few words of several scripts character by character.
Tokenizer mixtral_legacy() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = kFirstByteToken + b;
  }
  int next = 259;
  const auto token = [&](const std::string& t) {
    if (!vocab.contains(t)) vocab[t] = next++;
  };
  token("▁");
  for (char c = 'a'; c <= 'z'; ++c) token(std::string(1, c));
  json merges = json::array();
  for (const char* word : {"▁the", "▁and", "ing", "▁der", "▁die", "▁un", "▁你好", "▁世界", "ция", "▁ab"}) {
    std::string prefix;
    const std::string w = word;
    for (std::size_t i = 0; i < w.size();) {
      const std::size_t len = mxmoe::text::utf8::valid_char_length(w, i);
      const std::string c = w.substr(i, len);
      token(c);
      if (!prefix.empty() && !vocab.contains(prefix + c)) {
        merges.push_back(prefix + " " + c);
        token(prefix + c);
      }
      prefix += c;
      i += len;
    }
  }
  const auto added = [](int id, const char* content) {
    return json{{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false},  {"normalized", false}, {"special", true}};
  };
  const json doc = {
      {"version", "1.0"},
      {"added_tokens", {added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "▁"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
      {"pre_tokenizer", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"byte_fallback", true},
        {"fuse_unk", true},
        {"vocab", vocab},
        {"merges", merges}}}};
  return Tokenizer::from_json(doc.dump(), "mixtral-legacy");
}

struct Tokenizers {
  Tokenizer gpt_oss = stand_in("gpt-oss-20b", {});
  Tokenizer qwen3 = stand_in("qwen3-30b-a3b", {{"<think>", 151667}, {"</think>", 151668}});
  Tokenizer mixtral = mixtral_legacy();
};

bool is_byte_token(TokenId id) { return id >= kFirstByteToken && id < kFirstByteToken + 256; }

// Whether the stream must equal decode: ids of tokenizer 2 hold no group of byte tokens
// (special tokens skipped do not end one) that is not UTF-8 as a whole.
bool stream_contract_applies(const Tokenizer& t, bool byte_fallback, std::span<const TokenId> ids,
                             bool skip_special) {
  if (!byte_fallback) return true;
  std::string group;
  for (const TokenId id : ids) {
    if (skip_special && t.is_special(id)) continue;
    if (is_byte_token(id)) {
      group.push_back(static_cast<char>(id - kFirstByteToken));
      continue;
    }
    if (mxmoe::text::utf8::first_invalid(group) != std::string::npos) return false;
    group.clear();
  }
  return mxmoe::text::utf8::first_invalid(group) == std::string::npos;
}

// Decodes IDS streamed; each piece must be whole UTF-8. Returns the concatenation.
std::string streamed(const Tokenizer& t, std::span<const TokenId> ids, bool skip_special) {
  StreamDecoder stream(t, skip_special);
  std::string all;
  for (const TokenId id : ids) {
    const std::string piece = stream.push(id);
    check(mxmoe::text::utf8::first_invalid(piece) == std::string::npos);
    all += piece;
  }
  const std::string tail = stream.finish();
  check(mxmoe::text::utf8::first_invalid(tail) == std::string::npos);
  return all + tail;
}

void fuzz_ids(const Tokenizer& t, bool byte_fallback, std::string_view bytes, bool skip_special) {
  std::vector<TokenId> ids;
  bool all_tokens = true;
  const std::int64_t span = std::int64_t{t.vocab_size()} + 16;
  for (std::size_t i = 0; i + 1 < bytes.size(); i += 2) {
    const auto v = static_cast<std::uint16_t>(static_cast<unsigned char>(bytes[i]) |
                                              (static_cast<unsigned char>(bytes[i + 1]) << 8));
    // Mostly the low ids (bytes, merges); the top bits reach the special tokens, the holes
    // below them, the ids past the end and negative ones.
    TokenId id = v & 0x3FF;
    if (v & 0x8000) id = static_cast<TokenId>(span * (v & 0x7FFF) / 0x8000) - 8;
    ids.push_back(id);
    all_tokens = all_tokens && t.contains(id);
  }
  std::string decoded;
  try {
    decoded = t.decode(ids, skip_special);
    check(all_tokens);
  } catch (const std::out_of_range&) {
    check(!all_tokens);
    return;
  }
  check(mxmoe::text::utf8::first_invalid(decoded) == std::string::npos);
  const std::string stream = streamed(t, ids, skip_special);
  if (stream_contract_applies(t, byte_fallback, ids, skip_special)) check(stream == decoded);
}

void fuzz_text(const Tokenizer& t, int which, std::string_view text, bool parse_special,
               bool skip_special) {
  std::vector<TokenId> ids;
  try {
    ids = t.encode(text, parse_special);
  } catch (const std::invalid_argument&) {
    check(mxmoe::text::utf8::first_invalid(text) != std::string::npos);
    return;
  }
  check(mxmoe::text::utf8::first_invalid(text) == std::string::npos);
  for (const TokenId id : ids) check(t.contains(id));
  const std::string decoded = t.decode(ids, false);
  const std::string skipped = t.decode(ids, true);
  switch (which) {
    case 0:
      check(decoded == text);
      if (!parse_special) check(skipped == text);  // special tokens were text: none to skip
      break;
    case 1:  // NFC, which is idempotent: the decoded text encodes to itself again
      check(t.decode(t.encode(decoded, parse_special), false) == decoded);
      break;
    default:
      if (!parse_special && text.find("▁") == std::string_view::npos) check(decoded == text && skipped == text);
      break;
  }
  check(skipped.size() <= decoded.size());
  check(streamed(t, ids, skip_special) == (skip_special ? skipped : decoded));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Tokenizers tokenizers;  // loaded once: the documents are not what is fuzzed here
  if (size == 0) return 0;
  const unsigned options = data[0];
  const int which = static_cast<int>(options & 3u) % 3;
  const Tokenizer& t = which == 0 ? tokenizers.gpt_oss : which == 1 ? tokenizers.qwen3 : tokenizers.mixtral;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool parse_special = (options & 4u) != 0, skip_special = (options & 8u) != 0;
  if (options & 16u)
    fuzz_ids(t, which == 2, rest, skip_special);
  else
    fuzz_text(t, which, rest, parse_special, skip_special);
  return 0;
}
