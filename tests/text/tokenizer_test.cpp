// The tokenizer on hostile and edge inputs, with tokenizer.json documents written here: the
// expected ids follow from the BPE rules by hand (the comparison with the tokenizers library
// on real-shaped models is python/tests/test_tokenizer.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "mxmoe/errors.hpp"
#include "text/chat.hpp"
#include "text/tokenizer.hpp"
#include "text/utf8.hpp"

namespace mxmoe::text {
namespace {

// ", "<0xNN>": ID" for byte B, the byte tokens' ids following the six others.
std::string byte_entry(int b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ", \"<0x%02X>\": %d", b, 6 + b);
  return buf;
}

// A tiny Metaspace BPE with byte fallback: vocab a, b, ab, ▁, ▁ab, the 256 <0xNN> tokens.
std::string byte_fallback_json(const std::string& model_extra = "", const std::string& top_extra = "") {
  std::string vocab = R"("<unk>": 0, "a": 1, "b": 2, "ab": 3, "▁": 4, "▁ab": 5)";
  for (int b = 0; b < 256; ++b) vocab += byte_entry(b);
  return R"({"version": "1.0", )" + top_extra + R"("added_tokens": [
      {"id": 300, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 301, "content": "<x>", "single_word": false, "lstrip": true, "rstrip": true, "normalized": false, "special": false}],
    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true},
    "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"},
                {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}]},
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>", )" + model_extra +
         R"("vocab": {)" + vocab + R"(}, "merges": ["a b", ["▁", "ab"]]}})";
}


TEST(Tokenizer, MergesBothFormsAndByteFallback) {
  const Tokenizer t = Tokenizer::from_json(byte_fallback_json(), "test");
  // "ab ab" -> ▁ab ▁ab (the prefix ▁ from prepend_scheme first, merges a+b then ▁+ab).
  EXPECT_EQ(t.encode("ab ab"), (std::vector<TokenId>{5, 5}));
  // "é" is not in the vocabulary: its two UTF-8 bytes C3 A9 as byte tokens.
  const std::vector<TokenId> e = t.encode("é");
  EXPECT_EQ(e, (std::vector<TokenId>{4, 6 + 0xC3, 6 + 0xA9}));
  EXPECT_EQ(t.decode(e), "é");
}

TEST(Tokenizer, AddedTokensSpecialOrNotAndStrip) {
  const Tokenizer t = Tokenizer::from_json(byte_fallback_json(), "test");
  EXPECT_EQ(t.encode("<s>ab"), (std::vector<TokenId>{300, 3}));          // not at offset 0: no ▁
  EXPECT_EQ(t.encode("<s>ab", false).front(), 4);                       // special as text
  EXPECT_EQ(t.encode("ab  <x>  ab"), (std::vector<TokenId>{5, 301, 3}));  // lstrip/rstrip eat spaces
  EXPECT_TRUE(t.is_special(300));
  EXPECT_FALSE(t.is_special(301));
  EXPECT_EQ(t.decode(std::vector<TokenId>{300, 5}, true), "ab");
}

TEST(Tokenizer, InvalidUtf8NamesTheOffset) {
  const Tokenizer t = Tokenizer::from_json(byte_fallback_json(), "test");
  try {
    (void)t.encode(std::string("ab\xC3(", 4));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("offset 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)t.encode("\xED\xA0\x80"), std::invalid_argument);  // a surrogate
}

TEST(Tokenizer, IdOutOfRangeOnDecodeIsNamed) {
  const Tokenizer t = Tokenizer::from_json(byte_fallback_json(), "test");
  try {
    (void)t.decode(std::vector<TokenId>{1, 99999});
    FAIL();
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("99999"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)t.decode(std::vector<TokenId>{-1}), std::out_of_range);
  EXPECT_THROW((void)t.decode(std::vector<TokenId>{299}), std::out_of_range);  // a hole
}

TEST(Tokenizer, StreamingHoldsASplitCharacter) {
  const Tokenizer t = Tokenizer::from_json(byte_fallback_json(), "test");
  const std::vector<TokenId> ids = t.encode("ab 😀 é ab");
  StreamDecoder stream(t);
  std::string all;
  for (const TokenId id : ids) {
    const std::string piece = stream.push(id);
    EXPECT_EQ(utf8::first_invalid(piece), std::string::npos);  // whole characters only
    all += piece;
  }
  all += stream.finish();
  EXPECT_EQ(all, t.decode(ids));
  EXPECT_EQ(all, "ab 😀 é ab");
  // The four bytes of 😀 one at a time: nothing until the last, then the character.
  StreamDecoder bytes(t);
  EXPECT_EQ(bytes.push(6 + 0xF0), "");
  EXPECT_EQ(bytes.push(6 + 0x9F), "");
  EXPECT_EQ(bytes.push(6 + 0x98), "");
  EXPECT_EQ(bytes.push(6 + 0x80), "😀");
  // A character that never completes comes out as U+FFFD at the end, as decode writes it.
  EXPECT_EQ(bytes.push(6 + 0xE4), "");
  EXPECT_EQ(bytes.finish(), "\xEF\xBF\xBD");
}

// IDS streamed: each piece whole UTF-8; returns the concatenation of the pieces and finish().
std::string streamed(const Tokenizer& t, const std::vector<TokenId>& ids, bool skip_special) {
  StreamDecoder stream(t, skip_special);
  std::string all;
  for (const TokenId id : ids) {
    const std::string piece = stream.push(id);
    EXPECT_EQ(utf8::first_invalid(piece), std::string::npos) << piece;
    all += piece;
  }
  return all + stream.finish();
}

// Found by fuzz_tokenizer_text: the stream kept the last 4 ids as context, which could begin
// inside a character of byte tokens (after "€" as E2 82 AC, the context was A9 E2 82 AC, A9
// the last byte of "é"); that group is not UTF-8, so the next character's bytes decoded as
// U+FFFD. Characters of 2, 3 and 4 bytes in a row, all by byte fallback.
TEST(Tokenizer, StreamingConsecutiveByteFallbackCharacters) {
  const Tokenizer t = Tokenizer::from_json(byte_fallback_json(), "test");
  const std::string text = "é€😀中文é€ ab 👨‍👩‍👧 ab";
  const std::vector<TokenId> ids = t.encode(text);
  ASSERT_EQ(t.decode(ids), text);
  EXPECT_EQ(streamed(t, ids, false), text);
}

// Found while writing fuzz_tokenizer_text's stream property (reading the context rule): with
// skip_special, four special tokens in a row filled the context, which then decoded to
// nothing, so the next token was decoded as the first of the text and lost its leading space
// (Metaspace drops the first token's "▁").
TEST(Tokenizer, StreamingSkipsSpecialTokensWithoutLosingContext) {
  const Tokenizer t = Tokenizer::from_json(byte_fallback_json(), "test");
  const std::vector<TokenId> ids = {5, 300, 300, 300, 300, 300, 5};  // ▁ab <s> x 5 ▁ab
  ASSERT_EQ(t.decode(ids, true), "ab ab");
  EXPECT_EQ(streamed(t, ids, true), "ab ab");
  EXPECT_EQ(streamed(t, ids, false), t.decode(ids, false));
}

TEST(Tokenizer, AHugeWordIsNotQuadratic) {
  const Tokenizer t = Tokenizer::from_json(byte_fallback_json(), "test");
  std::string word;
  for (int k = 0; k < 50000; ++k) word += "ab";
  const std::vector<TokenId> ids = t.encode(word);  // ▁ab, then ab x 49999
  ASSERT_EQ(ids.size(), 50000u);
  EXPECT_EQ(ids[0], 5);
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(t.decode(ids), word);
}

TEST(Tokenizer, MalformedFieldsAreLoadErrorsNamingThem) {
  const auto expect_load_error = [](const std::string& doc, const std::string& field) {
    try {
      (void)Tokenizer::from_json(doc, "tok.json");
      ADD_FAILURE() << "accepted: " << doc;
    } catch (const LoadError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_load_error("{", "tok.json");
  expect_load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}}})", "merges");
  expect_load_error(R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})", "model.vocab");
  expect_load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a"]}})", "model.merges[0]");
  expect_load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [1]}})", "model.merges[0]");
  expect_load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0, "a": 1}, "merges": []}})", "duplicate");
  expect_load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": "z"}})", "unk_token");
  expect_load_error(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated"},
                       "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})", "pre_tokenizer.pattern");
  expect_load_error(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways"},
                       "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})", "behavior");
  expect_load_error(R"({"added_tokens": [{"id": 0}],
                       "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})", "added_tokens[0]");
}

TEST(Tokenizer, UnsupportedPartsAreNamedApart) {
  const auto expect_unsupported = [](const std::string& doc, const std::string& what) {
    try {
      (void)Tokenizer::from_json(doc, "tok.json");
      ADD_FAILURE() << "accepted: " << doc;
    } catch (const UnsupportedTokenizer& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  for (const char* type : {"WordLevel", "Unigram", "WordPiece"})
    expect_unsupported(std::string(R"({"model": {"type": ")") + type + R"(", "vocab": {}}})", type);
  expect_unsupported(R"({"pre_tokenizer": {"type": "BertPreTokenizer"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
                     "BertPreTokenizer");
  expect_unsupported(R"({"normalizer": {"type": "Lowercase"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
                     "Lowercase");
  expect_unsupported(R"({"decoder": {"type": "WordPiece"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
                     "WordPiece");
}

TEST(Tokenizer, UnknownCharacterWithoutUnkIsAnError) {
  const Tokenizer t = Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})", "t");
  EXPECT_EQ(t.encode("aa"), (std::vector<TokenId>{0, 0}));
  EXPECT_THROW((void)t.encode("ab"), std::invalid_argument);  // never a silently dropped "b"
}

TEST(Chat, FormatsAsPublished) {
  const std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "2+2?"}};
  EXPECT_EQ(render_chat(chat_format_for("gpt_oss"), m),
            "<|start|>system<|message|>Be brief.<|end|><|start|>user<|message|>Hi<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Hello<|end|>"
            "<|start|>user<|message|>2+2?<|end|><|start|>assistant");
  EXPECT_EQ(render_chat(chat_format_for("qwen3_moe"), m),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(ChatFormat::chatml, std::span(m).subspan(1, 1), {true, false}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(render_chat(chat_format_for("mixtral"), m),
            "<s>[INST] Be brief.\n\nHi [/INST]Hello</s>[INST] 2+2? [/INST]");
  EXPECT_THROW((void)chat_format_for("llama"), std::invalid_argument);
  EXPECT_THROW((void)render_chat(ChatFormat::mistral_inst, std::span(m).subspan(2)), std::invalid_argument);
  const std::vector<ChatMessage> tool = {{"tool", "x"}};
  EXPECT_THROW((void)render_chat(ChatFormat::chatml, tool), std::invalid_argument);
}

// Found by fuzz_chat: a system message with no user message after it was dropped by the
// [INST] format (it is written before the first user message), rendering "<s>" alone.
TEST(Chat, AnInstSystemMessageAloneIsRefusedNotDropped) {
  const std::vector<ChatMessage> system_only = {{"system", "Be brief."}};
  try {
    (void)render_chat(ChatFormat::mistral_inst, system_only);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("system message alone"), std::string::npos) << e.what();
  }
  // Every content of an accepted conversation is in its text.
  const std::vector<ChatMessage> ok = {{"system", "S"}, {"user", "U"}};
  EXPECT_EQ(render_chat(ChatFormat::mistral_inst, ok), "<s>[INST] S\n\nU [/INST]");
}

// Found by the hostile pass of issue 38: a role holding a NUL gave a message cut at the NUL
// ("role \"user") where the server, the Python binding and a terminal read it as a C string.
TEST(Chat, ARefusedRoleIsShownEscapedAndWhole) {
  for (const ChatFormat format : {ChatFormat::harmony, ChatFormat::chatml, ChatFormat::mistral_inst}) {
    const std::vector<ChatMessage> m = {{std::string("user\0\x1b[2J", 9), "x"}};
    try {
      (void)render_chat(format, m);
      FAIL() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(R"(role "user\x00\x1b[2J")"), std::string::npos) << e.what();
    }
  }
  const std::vector<ChatMessage> long_role = {{std::string(5000, 'r'), "x"}};
  try {
    (void)render_chat(ChatFormat::chatml, long_role);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u) << e.what();
  }
}

}  // namespace

}  // namespace mxmoe::text
