// The tokenizer.json pipeline (see tokenizer.hpp and docs/TOKENIZERS.md). Loading turns the
// document into plain steps (sequences flattened), refusing what is not implemented by name;
// encoding runs added tokens -> normalizer -> pre-tokenizer -> BPE, decoding the decoder's
// steps over the tokens' strings, as the tokenizers library defines each stage.
#include "text/tokenizer.hpp"

#include <fmt/core.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <functional>
#include <map>
#include <queue>
#include <unordered_map>

#include "base/byte_level.hpp"
#include "base/file.hpp"
#include "base/json.hpp"
#include "mxmoe/errors.hpp"
#include "text/regex.hpp"
#include "text/utf8.hpp"

namespace mxmoe::text {
namespace {

using json::Json;

// GPT-2's pre-tokenizer pattern, used by ByteLevel with use_regex.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The bytes a token written in the byte-level alphabet stands for; nullopt where a character
// is outside the alphabet (an added token such as "<|start|>" is ASCII and maps to itself).
class ByteAlphabet {
 public:
  ByteAlphabet() {
    const std::array<unsigned, 256> cp = byte_level::code_points();
    for (unsigned b = 0; b < 256; ++b) byte_of_[cp[b]] = static_cast<int>(b);
  }
  std::optional<std::string> bytes(std::string_view token) const {
    std::string out;
    for (std::size_t i = 0; i < token.size();) {
      const std::size_t len = utf8::valid_char_length(token, i);
      if (len == 0) return std::nullopt;
      const char32_t c = utf8::decode_at(token, i, len);
      if (c >= byte_of_.size() || byte_of_[c] == kNone) return std::nullopt;
      out.push_back(static_cast<char>(byte_of_[c]));
      i += len;
    }
    return out;
  }

 private:
  static constexpr int kNone = -1;
  std::array<int, 512> byte_of_ = filled();
  static std::array<int, 512> filled() {
    std::array<int, 512> a{};
    a.fill(kNone);
    return a;
  }
};

// ---- reading the document -----------------------------------------------------------------

// Where a field is, for messages: "tokenizer.json: model.vocab".
class Reader {
 public:
  explicit Reader(std::string_view what) : what_(what) {}

  [[noreturn]] void fail(const std::string& where, const std::string& why) const {
    throw LoadError(fmt::format("{}: {}: {}", what_, where, why));
  }
  const Json& member(const Json& j, const std::string& where, const char* key) const {
    if (!j.is_object()) fail(where, "not an object");
    const auto it = j.find(key);
    if (it == j.end()) fail(where, fmt::format("field \"{}\" is missing", key));
    return *it;
  }
  const Json* optional(const Json& j, const char* key) const {
    const auto it = j.find(key);
    return (it == j.end() || it->is_null()) ? nullptr : &*it;
  }
  std::string string(const Json& j, const std::string& where, const char* key) const {
    const Json& v = member(j, where, key);
    if (!v.is_string()) fail(where + "." + key, "not a string");
    return v.get<std::string>();
  }
  bool boolean(const Json& j, const std::string& where, const char* key, bool fallback) const {
    const Json* v = optional(j, key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(where + "." + key, "not a boolean");
    return v->get<bool>();
  }
  TokenId id(const Json& v, const std::string& where) const {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
        v.get<std::int64_t>() > std::numeric_limits<TokenId>::max() - 1)
      fail(where, fmt::format("not a token id (an integer 0..{})",
                              std::numeric_limits<TokenId>::max() - 1));
    return static_cast<TokenId>(v.get<std::int64_t>());
  }
  std::string type(const Json& j, const std::string& where) const { return string(j, where, "type"); }

 private:
  std::string what_;
};

// A Split or Replace pattern: {"String": s} or {"Regex": r}.
Regex read_pattern(const Reader& r, const Json& j, const std::string& where) {
  const Json& p = r.member(j, where, "pattern");
  if (p.is_object() && p.size() == 1 && p.contains("String") && p["String"].is_string())
    return Regex(regex_escape(p["String"].get<std::string>()));
  if (p.is_object() && p.size() == 1 && p.contains("Regex") && p["Regex"].is_string()) {
    try {
      return Regex(p["Regex"].get<std::string>());
    } catch (const std::invalid_argument& e) {
      r.fail(where + ".pattern", e.what());
    }
  }
  r.fail(where + ".pattern", "not {\"String\": ...} or {\"Regex\": ...}");
}

// The elements of a Sequence (its "normalizers", "pretokenizers" or "decoders") in order,
// nested sequences flattened: applying them one after the other is what a sequence means.
void flatten(const Reader& r, const Json& j, const std::string& where, const char* list,
             const std::function<void(const Json&, const std::string&)>& each) {
  if (r.type(j, where) != "Sequence") return each(j, where);
  const Json& items = r.member(j, where, list);
  if (!items.is_array()) r.fail(where + "." + list, "not an array");
  for (std::size_t k = 0; k < items.size(); ++k)
    flatten(r, items[k], fmt::format("{}.{}[{}]", where, list, k), list, each);
}

// ---- normalizers --------------------------------------------------------------------------

struct NormalizerStep {
  enum class Kind { unicode_form, prepend, replace } kind;
  const icu::Normalizer2* form = nullptr;  // NFC, NFD, NFKC, NFKD (ICU's singletons)
  std::string text;                        // prepend: the prefix; replace: the content
  std::optional<Regex> pattern;            // replace
};

const icu::Normalizer2* unicode_form(const std::string& type) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  if (type == "NFC") n = icu::Normalizer2::getNFCInstance(status);
  if (type == "NFD") n = icu::Normalizer2::getNFDInstance(status);
  if (type == "NFKC") n = icu::Normalizer2::getNFKCInstance(status);
  if (type == "NFKD") n = icu::Normalizer2::getNFKDInstance(status);
  if (n && U_FAILURE(status))
    throw std::runtime_error(fmt::format("ICU has no {} normalizer: {}", type, u_errorName(status)));
  return n;
}

std::vector<NormalizerStep> read_normalizer(const Reader& r, const Json* j) {
  std::vector<NormalizerStep> steps;
  if (!j) return steps;
  flatten(r, *j, "normalizer", "normalizers", [&](const Json& n, const std::string& where) {
    const std::string type = r.type(n, where);
    if (const icu::Normalizer2* form = unicode_form(type)) {
      steps.push_back({NormalizerStep::Kind::unicode_form, form, {}, std::nullopt});
    } else if (type == "Prepend") {
      steps.push_back({NormalizerStep::Kind::prepend, nullptr, r.string(n, where, "prepend"), std::nullopt});
    } else if (type == "Replace") {
      steps.push_back({NormalizerStep::Kind::replace, nullptr, r.string(n, where, "content"),
                       read_pattern(r, n, where)});
    } else {
      throw UnsupportedTokenizer(fmt::format(
          "{}: normalizer \"{}\" is not supported (mxmoe applies NFC, NFD, NFKC, NFKD, Prepend, "
          "Replace and Sequence)", where, type));
    }
  });
  return steps;
}

std::string replace_all(const Regex& pattern, std::string_view s, std::string_view content) {
  std::string out;
  std::size_t last = 0;
  for (const auto& [b, e] : pattern.find_all(s)) {
    out.append(s.substr(last, b - last));
    out.append(content);
    last = e;
  }
  out.append(s.substr(last));
  return out;
}

std::string normalize(const std::vector<NormalizerStep>& steps, std::string s) {
  for (const NormalizerStep& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::unicode_form: {
        UErrorCode status = U_ZERO_ERROR;
        const icu::UnicodeString in = icu::UnicodeString::fromUTF8(s);
        const icu::UnicodeString out = step.form->normalize(in, status);
        if (U_FAILURE(status))
          throw std::runtime_error(fmt::format("Unicode normalization failed: {}", u_errorName(status)));
        s.clear();
        out.toUTF8String(s);
        break;
      }
      case NormalizerStep::Kind::prepend:
        if (!s.empty()) s = step.text + s;
        break;
      case NormalizerStep::Kind::replace:
        s = replace_all(*step.pattern, s, step.text);
        break;
    }
  }
  return s;
}

// ---- pre-tokenizers -----------------------------------------------------------------------

// A piece of text on its way to the model; `first` where it begins the input (Metaspace's
// prepend_scheme "first").
struct Piece {
  std::string text;
  bool first = false;
};

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };
enum class Prepend { always, first, never };

struct PreTokenizerStep {
  enum class Kind { split, byte_level, metaspace } kind;
  std::optional<Regex> pattern;  // split; byte_level with use_regex; metaspace: the replacement
  Behavior behavior = Behavior::isolated;
  bool invert = false;
  bool add_prefix_space = false;     // byte_level
  std::string replacement;           // metaspace
  Prepend prepend = Prepend::always;  // metaspace
  bool split_words = true;           // metaspace
};

Behavior read_behavior(const Reader& r, const Json& j, const std::string& where) {
  const std::string b = r.string(j, where, "behavior");
  if (b == "Removed") return Behavior::removed;
  if (b == "Isolated") return Behavior::isolated;
  if (b == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (b == "MergedWithNext") return Behavior::merged_with_next;
  if (b == "Contiguous") return Behavior::contiguous;
  r.fail(where + ".behavior", fmt::format("unknown behavior \"{}\"", b));
}

Prepend read_prepend(const Reader& r, const Json& j, const std::string& where) {
  if (const Json* scheme = r.optional(j, "prepend_scheme")) {
    const std::string s = scheme->is_string() ? scheme->get<std::string>() : "";
    if (s == "always") return Prepend::always;
    if (s == "first") return Prepend::first;
    if (s == "never") return Prepend::never;
    r.fail(where + ".prepend_scheme", "not \"always\", \"first\" or \"never\"");
  }
  return r.boolean(j, where, "add_prefix_space", true) ? Prepend::always : Prepend::never;
}

std::string read_replacement(const Reader& r, const Json& j, const std::string& where) {
  std::string s = r.string(j, where, "replacement");
  if (s.empty() || utf8::valid_char_length(s, 0) != s.size())
    r.fail(where + ".replacement", "not one character");
  return s;
}

// Also says whether the pipeline is byte-level (a ByteLevel step, which must come last).
std::vector<PreTokenizerStep> read_pre_tokenizer(const Reader& r, const Json* j, bool& byte_level) {
  std::vector<PreTokenizerStep> steps;
  byte_level = false;
  if (!j) return steps;
  flatten(r, *j, "pre_tokenizer", "pretokenizers", [&](const Json& p, const std::string& where) {
    if (byte_level)
      throw UnsupportedTokenizer(where + ": a pre-tokenizer after ByteLevel is not supported");
    const std::string type = r.type(p, where);
    PreTokenizerStep step{};
    if (type == "Split") {
      step.kind = PreTokenizerStep::Kind::split;
      step.pattern = read_pattern(r, p, where);
      step.behavior = read_behavior(r, p, where);
      step.invert = r.boolean(p, where, "invert", false);
    } else if (type == "ByteLevel") {
      step.kind = PreTokenizerStep::Kind::byte_level;
      step.add_prefix_space = r.boolean(p, where, "add_prefix_space", true);
      if (r.boolean(p, where, "use_regex", true)) step.pattern = Regex(kGpt2Pattern);
      byte_level = true;
    } else if (type == "Metaspace") {
      step.kind = PreTokenizerStep::Kind::metaspace;
      step.replacement = read_replacement(r, p, where);
      step.prepend = read_prepend(r, p, where);
      step.split_words = r.boolean(p, where, "split", true);
      step.pattern = Regex(regex_escape(step.replacement));
    } else {
      throw UnsupportedTokenizer(fmt::format(
          "{}: pre-tokenizer \"{}\" is not supported (mxmoe runs Split, ByteLevel, Metaspace and "
          "Sequence)", where, type));
    }
    steps.push_back(std::move(step));
  });
  return steps;
}

// PIECE cut at MATCHES (offsets in piece.text) as BEHAVIOR says; empty pieces dropped.
void split_piece(const Piece& piece, const std::vector<std::pair<std::size_t, std::size_t>>& matches,
                 Behavior behavior, bool invert, std::vector<Piece>& out) {
  struct Segment {
    std::size_t begin, end;
    bool match;
  };
  std::vector<Segment> segments;
  std::size_t last = 0;
  for (const auto& [b, e] : matches) {
    if (b > last) segments.push_back({last, b, invert});
    segments.push_back({b, e, !invert});
    last = e;
  }
  if (last < piece.text.size()) segments.push_back({last, piece.text.size(), invert});

  std::vector<Segment> merged;
  bool previous_match = false;  // merged_with_next: the last segment kept was a bare match
  for (const Segment& s : segments) {
    switch (behavior) {
      case Behavior::removed:
        if (!s.match) merged.push_back(s);
        break;
      case Behavior::isolated:
        merged.push_back(s);
        break;
      case Behavior::merged_with_previous:
        if (s.match && !merged.empty() && !merged.back().match)
          merged.back().end = s.end, merged.back().match = true;
        else
          merged.push_back(s);
        break;
      case Behavior::merged_with_next:
        if (!s.match && previous_match)
          merged.back().end = s.end;
        else
          merged.push_back(s);
        previous_match = s.match;
        break;
      case Behavior::contiguous:
        if (s.match && !merged.empty() && merged.back().match)
          merged.back().end = s.end;
        else
          merged.push_back(s);
        break;
    }
  }
  for (const Segment& s : merged)
    if (s.end > s.begin)
      out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.first && s.begin == 0});
}

std::vector<Piece> pre_tokenize(const std::vector<PreTokenizerStep>& steps, Piece input) {
  std::vector<Piece> pieces{std::move(input)};
  for (const PreTokenizerStep& step : steps) {
    std::vector<Piece> next;
    for (Piece& p : pieces) {
      switch (step.kind) {
        case PreTokenizerStep::Kind::split:
          split_piece(p, step.pattern->find_all(p.text), step.behavior, step.invert, next);
          break;
        case PreTokenizerStep::Kind::byte_level:
          if (step.add_prefix_space && !p.text.starts_with(' ')) p.text.insert(0, 1, ' ');
          if (step.pattern)
            split_piece(p, step.pattern->find_all(p.text), Behavior::isolated, false, next);
          else
            next.push_back(std::move(p));
          break;
        case PreTokenizerStep::Kind::metaspace: {
          std::string s;
          for (const char c : p.text) {
            if (c == ' ')
              s.append(step.replacement);
            else
              s.push_back(c);
          }
          const bool prepend = step.prepend == Prepend::always || (step.prepend == Prepend::first && p.first);
          if (prepend && !s.starts_with(step.replacement)) s.insert(0, step.replacement);
          const Piece replaced{std::move(s), p.first};
          if (step.split_words)
            split_piece(replaced, step.pattern->find_all(replaced.text),
                        Behavior::merged_with_next, false, next);
          else
            next.push_back(replaced);
          break;
        }
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

// ---- the BPE model ------------------------------------------------------------------------

struct Bpe {
  std::unordered_map<std::string, TokenId> vocab;  // keys as the model sees words (bytes when byte-level)
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, TokenId>> merges;  // pair -> rank, result
  std::optional<TokenId> unk;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  std::array<TokenId, 256> byte_tokens{};  // "<0xNN>"; -1 where the vocabulary has none

  static std::uint64_t key(TokenId a, TokenId b) {
    return (std::uint64_t{static_cast<std::uint32_t>(a)} << 32) | static_cast<std::uint32_t>(b);
  }

  // Appends the ids of WORD; UNIT_BYTES: each byte is a symbol (byte-level), else each
  // UTF-8 character.
  void encode_word(std::string_view word, bool unit_bytes, std::vector<TokenId>& out) const {
    if (ignore_merges) {
      if (const auto it = vocab.find(std::string(word)); it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    struct Symbol {
      TokenId id;
      int prev, next;
      bool alive;
    };
    std::vector<Symbol> symbols;
    bool last_unk = false;
    auto push = [&](TokenId id) {
      const int n = static_cast<int>(symbols.size());
      symbols.push_back({id, n - 1, -1, true});
    };
    for (std::size_t i = 0; i < word.size();) {
      const std::size_t len = unit_bytes ? 1 : std::max<std::size_t>(1, utf8::valid_char_length(word, i));
      const std::string_view unit = word.substr(i, len);
      i += len;
      if (const auto it = vocab.find(std::string(unit)); it != vocab.end()) {
        push(it->second);
        last_unk = false;
        continue;
      }
      if (byte_fallback && std::all_of(unit.begin(), unit.end(), [&](char c) {
            return byte_tokens[static_cast<unsigned char>(c)] >= 0;
          })) {
        for (const char c : unit) push(byte_tokens[static_cast<unsigned char>(c)]);
        last_unk = false;
        continue;
      }
      if (!unk)
        throw std::invalid_argument(fmt::format(
            "the tokenizer's model has no token for \"{}\" and no unk_token", utf8::lossy(unit)));
      if (!(fuse_unk && last_unk)) push(*unk);
      last_unk = true;
    }
    for (std::size_t k = 0; k + 1 < symbols.size(); ++k) symbols[k].next = static_cast<int>(k + 1);

    // The lowest-ranked pair first, the leftmost among equals; stale entries are skipped.
    using Candidate = std::pair<std::uint32_t, int>;  // rank, left symbol
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    auto consider = [&](int left) {
      if (left < 0 || symbols[static_cast<std::size_t>(left)].next < 0) return;
      const Symbol& a = symbols[static_cast<std::size_t>(left)];
      const auto it = merges.find(key(a.id, symbols[static_cast<std::size_t>(a.next)].id));
      if (it != merges.end()) queue.push({it->second.first, left});
    };
    for (std::size_t k = 0; k + 1 < symbols.size(); ++k) consider(static_cast<int>(k));
    while (!queue.empty()) {
      const auto [rank, left] = queue.top();
      queue.pop();
      Symbol& a = symbols[static_cast<std::size_t>(left)];
      if (!a.alive || a.next < 0) continue;
      Symbol& b = symbols[static_cast<std::size_t>(a.next)];
      const auto it = merges.find(key(a.id, b.id));
      if (it == merges.end() || it->second.first != rank) continue;
      a.id = it->second.second;
      b.alive = false;
      a.next = b.next;
      if (b.next >= 0) symbols[static_cast<std::size_t>(b.next)].prev = left;
      consider(a.prev);
      consider(left);
    }
    for (const Symbol& s : symbols)
      if (s.alive) out.push_back(s.id);
  }
};

// ---- decoders -----------------------------------------------------------------------------

struct DecoderStep {
  enum class Kind { byte_level, byte_fallback, metaspace, replace, strip, fuse } kind;
  std::optional<Regex> pattern;  // replace: the pattern; metaspace: the replacement
  std::string text;              // replace: content; metaspace: replacement; strip: content
  Prepend prepend = Prepend::always;
  std::size_t start = 0, stop = 0;  // strip
};

std::vector<DecoderStep> read_decoder(const Reader& r, const Json* j) {
  std::vector<DecoderStep> steps;
  if (!j) return steps;
  flatten(r, *j, "decoder", "decoders", [&](const Json& d, const std::string& where) {
    const std::string type = r.type(d, where);
    DecoderStep step{};
    if (type == "ByteLevel") {
      step.kind = DecoderStep::Kind::byte_level;
    } else if (type == "ByteFallback") {
      step.kind = DecoderStep::Kind::byte_fallback;
    } else if (type == "Fuse") {
      step.kind = DecoderStep::Kind::fuse;
    } else if (type == "Metaspace") {
      step.kind = DecoderStep::Kind::metaspace;
      step.text = read_replacement(r, d, where);
      step.pattern = Regex(regex_escape(step.text));
      step.prepend = read_prepend(r, d, where);
    } else if (type == "Replace") {
      step.kind = DecoderStep::Kind::replace;
      step.pattern = read_pattern(r, d, where);
      step.text = r.string(d, where, "content");
    } else if (type == "Strip") {
      step.kind = DecoderStep::Kind::strip;
      step.text = r.string(d, where, "content");
      if (utf8::valid_char_length(step.text, 0) != step.text.size() || step.text.empty())
        r.fail(where + ".content", "not one character");
      step.start = static_cast<std::size_t>(json::get_integer(d, where, "start", 0, 1 << 20));
      step.stop = static_cast<std::size_t>(json::get_integer(d, where, "stop", 0, 1 << 20));
    } else {
      throw UnsupportedTokenizer(fmt::format(
          "{}: decoder \"{}\" is not supported (mxmoe runs ByteLevel, ByteFallback, Metaspace, "
          "Replace, Strip, Fuse and Sequence)", where, type));
    }
    steps.push_back(std::move(step));
  });
  return steps;
}

// "<0xNN>" -> NN, else -1.
int byte_token_value(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  int v = 0;
  for (const char c : t.substr(3, 2)) {
    const int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

// ---- the tokenizer ------------------------------------------------------------------------

struct AddedToken {
  TokenId id;
  std::string content;
  bool single_word, lstrip, rstrip, normalized, special;
};

// The added tokens of one kind (normalized or not) as a byte trie, for leftmost-longest search.
class AddedTrie {
 public:
  void add(const std::string& text, std::size_t token) {
    std::size_t node = 0;
    for (const char c : text) {
      auto [it, inserted] = nodes_[node].next.try_emplace(static_cast<unsigned char>(c), nodes_.size());
      if (inserted) nodes_.emplace_back();
      node = it->second;
    }
    nodes_[node].token = static_cast<std::ptrdiff_t>(token);
  }
  // The longest token (index into TOKENS) at S[i] that ACCEPT takes, and its end.
  std::optional<std::pair<std::size_t, std::size_t>> longest(
      std::string_view s, std::size_t i, const std::function<bool(std::size_t)>& accept) const {
    std::optional<std::pair<std::size_t, std::size_t>> best;
    std::size_t node = 0;
    for (std::size_t k = i; k < s.size(); ++k) {
      const auto it = nodes_[node].next.find(static_cast<unsigned char>(s[k]));
      if (it == nodes_[node].next.end()) break;
      node = it->second;
      const std::ptrdiff_t t = nodes_[node].token;
      if (t >= 0 && accept(static_cast<std::size_t>(t))) best = {{static_cast<std::size_t>(t), k + 1}};
    }
    return best;
  }

 private:
  struct Node {
    std::map<unsigned char, std::size_t> next;
    std::ptrdiff_t token = -1;
  };
  std::vector<Node> nodes_ = std::vector<Node>(1);
};

struct Tokenizer::Impl {
  std::vector<AddedToken> added;
  AddedTrie raw_trie, normalized_trie;  // added tokens matched before / after normalization
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  bool byte_level = false;
  Bpe bpe;
  std::vector<DecoderStep> decoder;
  std::vector<std::string> tokens;  // id -> the token as the file writes it
  std::vector<bool> present;        // id -> some token has it
  std::vector<bool> special;
  std::unordered_map<std::string, TokenId> by_text;  // the file's form -> id
  ByteAlphabet alphabet;

  struct Section {
    std::string_view text;
    std::ptrdiff_t added;  // index into `added`, or -1 for text the model encodes
  };
  std::vector<Section> split_added(std::string_view s, const AddedTrie& trie, bool parse_special) const;
  void encode_text(std::string_view s, bool first, bool parse_special, std::vector<TokenId>& out,
                   std::unordered_map<std::string, std::vector<TokenId>>& cache) const;
  std::string decode(std::span<const TokenId> ids, bool skip_special, bool hold_tail) const;
  void check_id(TokenId id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= tokens.size() || !present[static_cast<std::size_t>(id)])
      throw std::out_of_range(fmt::format("token id {} is not in the vocabulary (ids 0..{})", id,
                                          static_cast<std::ptrdiff_t>(tokens.size()) - 1));
  }
};

namespace {

bool is_word_char(std::string_view s, std::size_t i) {
  const std::size_t len = utf8::valid_char_length(s, i);
  if (len == 0) return false;
  const char32_t cp = utf8::decode_at(s, i, len);
  return cp == U'_' || u_isalnum(static_cast<UChar32>(cp));
}

bool is_space_at(std::string_view s, std::size_t i, std::size_t& len) {
  len = utf8::valid_char_length(s, i);
  return len > 0 && u_isUWhiteSpace(static_cast<UChar32>(utf8::decode_at(s, i, len)));
}

// The start of the character that ends at S[end) (S is valid UTF-8).
std::size_t char_before(std::string_view s, std::size_t end) {
  std::size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

}  // namespace

std::vector<Tokenizer::Impl::Section> Tokenizer::Impl::split_added(std::string_view s, const AddedTrie& trie,
                                                                   bool parse_special) const {
  std::vector<Section> out;
  const auto accept = [&](std::size_t t) { return parse_special || !added[t].special; };
  std::size_t done = 0;  // the end of the last section
  for (std::size_t i = 0; i < s.size();) {
    const auto m = trie.longest(s, i, accept);
    if (!m) {
      ++i;
      continue;
    }
    const AddedToken& t = added[m->first];
    std::size_t begin = i, end = m->second;
    i = end;
    if (t.single_word && ((begin > 0 && is_word_char(s, char_before(s, begin))) ||
                          (end < s.size() && is_word_char(s, end))))
      continue;
    std::size_t len = 0;
    if (t.lstrip)
      while (begin > done && is_space_at(s, char_before(s, begin), len)) begin = char_before(s, begin);
    if (t.rstrip)
      while (end < s.size() && is_space_at(s, end, len)) end += len;
    if (begin > done) out.push_back({s.substr(done, begin - done), -1});
    out.push_back({s.substr(begin, end - begin), static_cast<std::ptrdiff_t>(m->first)});
    done = i = end;
  }
  if (done < s.size()) out.push_back({s.substr(done), -1});
  return out;
}

void Tokenizer::Impl::encode_text(std::string_view s, bool first, bool parse_special, std::vector<TokenId>& out,
                                  std::unordered_map<std::string, std::vector<TokenId>>& cache) const {
  const std::string normalized = normalize(normalizer, std::string(s));
  for (const Section& section : split_added(normalized, normalized_trie, parse_special)) {
    if (section.added >= 0) {
      out.push_back(added[static_cast<std::size_t>(section.added)].id);
      continue;
    }
    const bool at_start = first && section.text.data() == normalized.data();
    for (const Piece& word : pre_tokenize(pre_tokenizer, {std::string(section.text), at_start})) {
      auto [it, inserted] = cache.try_emplace(word.text);
      if (inserted) bpe.encode_word(word.text, byte_level, it->second);
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
  }
}

std::string Tokenizer::Impl::decode(std::span<const TokenId> ids, bool skip_special, bool hold_tail) const {
  std::vector<std::string> parts;
  for (const TokenId id : ids) {
    check_id(id);
    if (!(skip_special && special[static_cast<std::size_t>(id)])) parts.push_back(tokens[static_cast<std::size_t>(id)]);
  }
  for (const DecoderStep& step : decoder) {
    std::vector<std::string> next;
    switch (step.kind) {
      case DecoderStep::Kind::byte_level: {
        // Each token's characters back to bytes; a token with a character outside the
        // alphabet (an added token) stays as written.
        std::string bytes;
        for (const std::string& t : parts) bytes += alphabet.bytes(t).value_or(t);
        next.push_back(std::move(bytes));
        break;
      }
      case DecoderStep::Kind::byte_fallback: {
        std::string group;
        std::size_t count = 0;
        auto flush = [&](bool last) {
          if (count == 0) return;
          if (utf8::first_invalid(group) == std::string::npos ||
              (last && hold_tail && utf8::incomplete_tail(group) > 0 &&
               utf8::first_invalid(group.substr(0, group.size() - utf8::incomplete_tail(group))) ==
                   std::string::npos))
            next.push_back(group);
          else
            for (std::size_t k = 0; k < count; ++k) next.emplace_back(utf8::kReplacement);
          group.clear();
          count = 0;
        };
        for (const std::string& t : parts) {
          const int v = byte_token_value(t);
          if (v >= 0) {
            group.push_back(static_cast<char>(v));
            ++count;
          } else {
            flush(false);
            next.push_back(t);
          }
        }
        flush(true);
        break;
      }
      case DecoderStep::Kind::fuse: {
        std::string all;
        for (const std::string& t : parts) all += t;
        next.push_back(std::move(all));
        break;
      }
      case DecoderStep::Kind::metaspace:
        // The replacement becomes a space, except in the first token, where the library
        // drops every one of them (its leading spaces were prepended by the encoder).
        for (std::size_t k = 0; k < parts.size(); ++k)
          next.push_back(replace_all(*step.pattern, parts[k],
                                     (k == 0 && step.prepend != Prepend::never) ? "" : " "));
        break;
      case DecoderStep::Kind::replace:
        for (const std::string& t : parts) next.push_back(replace_all(*step.pattern, t, step.text));
        break;
      case DecoderStep::Kind::strip:
        for (std::string t : parts) {
          for (std::size_t k = 0; k < step.start && t.starts_with(step.text); ++k) t.erase(0, step.text.size());
          for (std::size_t k = 0; k < step.stop && t.ends_with(step.text); ++k)
            t.erase(t.size() - step.text.size());
          next.push_back(std::move(t));
        }
        break;
    }
    parts = std::move(next);
  }
  std::string out;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (k > 0 && decoder.empty()) out += ' ';  // the library joins with spaces without a decoder
    out += parts[k];
  }
  return hold_tail ? out : utf8::lossy(out);
}

std::string tokenizer_file(const std::string& path_or_dir) {
  std::error_code ec;
  return std::filesystem::is_directory(path_or_dir, ec)
             ? (std::filesystem::path(path_or_dir) / "tokenizer.json").string()
             : path_or_dir;
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  return from_json(files::read_regular_file<LoadError>(path), path);
}

Tokenizer Tokenizer::from_json(std::string_view json_text, std::string_view what) {
  const Json doc = json::parse_strict<LoadError>(json_text, what);
  const Reader r(what);
  auto impl = std::make_unique<Impl>();

  const Json& model = r.member(doc, "(top level)", "model");
  const std::string type = model.contains("type") ? r.type(model, "model") : "BPE";
  if (type != "BPE")
    throw UnsupportedTokenizer(fmt::format(
        "{}: model type \"{}\" is not supported (mxmoe runs BPE models)", what, type));
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json* v = r.optional(model, field);
    if (v && !(v->is_string() && v->get<std::string>().empty()))
      throw UnsupportedTokenizer(fmt::format("{}: model.{} is not supported", what, field));
  }
  if (const Json* dropout = r.optional(model, "dropout"); dropout && !(dropout->is_number() && dropout->get<double>() == 0))
    throw UnsupportedTokenizer(fmt::format("{}: model.dropout (random merges) is not supported", what));

  impl->normalizer = read_normalizer(r, r.optional(doc, "normalizer"));
  impl->pre_tokenizer = read_pre_tokenizer(r, r.optional(doc, "pre_tokenizer"), impl->byte_level);
  impl->decoder = read_decoder(r, r.optional(doc, "decoder"));

  // The vocabulary and the added tokens give every id its text.
  auto place = [&](TokenId id, const std::string& text, const std::string& where) {
    const auto k = static_cast<std::size_t>(id);
    if (k >= impl->tokens.size()) {
      impl->tokens.resize(k + 1);
      impl->present.resize(k + 1);
      impl->special.resize(k + 1);
    }
    if (impl->present[k] && impl->tokens[k] != text)
      r.fail(where, fmt::format("id {} is already \"{}\"", id, impl->tokens[k]));
    impl->tokens[k] = text;
    impl->present[k] = true;
    impl->by_text[text] = id;
  };
  const Json& vocab = r.member(model, "model", "vocab");
  if (!vocab.is_object()) r.fail("model.vocab", "not an object");
  for (const auto& [text, id_json] : vocab.items()) {
    const std::string where = "model.vocab[\"" + utf8::lossy(text) + "\"]";
    const TokenId id = r.id(id_json, where);
    place(id, text, where);
    // A byte-level model sees bytes: the alphabet's characters back to them.
    impl->bpe.vocab[impl->byte_level ? impl->alphabet.bytes(text).value_or(text) : text] = id;
  }
  impl->bpe.byte_fallback = r.boolean(model, "model", "byte_fallback", false);
  impl->bpe.fuse_unk = r.boolean(model, "model", "fuse_unk", false);
  impl->bpe.ignore_merges = r.boolean(model, "model", "ignore_merges", false);
  impl->bpe.byte_tokens.fill(-1);
  for (unsigned b = 0; b < 256; ++b)
    if (const auto it = vocab.find(fmt::format("<0x{:02X}>", b)); it != vocab.end())
      impl->bpe.byte_tokens[b] = it->get<TokenId>();
  if (const Json* unk = r.optional(model, "unk_token")) {
    if (!unk->is_string()) r.fail("model.unk_token", "not a string");
    const auto it = vocab.find(unk->get<std::string>());
    if (it == vocab.end())
      r.fail("model.unk_token", fmt::format("\"{}\" is not in the vocabulary", unk->get<std::string>()));
    impl->bpe.unk = it->get<TokenId>();
  }

  const Json& merges = r.member(model, "model", "merges");
  if (!merges.is_array()) r.fail("model.merges", "not an array");
  for (std::size_t k = 0; k < merges.size(); ++k) {
    const std::string where = fmt::format("model.merges[{}]", k);
    const Json& m = merges[k];
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        r.fail(where, fmt::format("\"{}\" is not two tokens separated by one space", utf8::lossy(s)));
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      r.fail(where, "not \"a b\" nor [\"a\", \"b\"]");
    }
    const auto id_of = [&](const std::string& t) {
      const auto it = vocab.find(t);
      if (it == vocab.end()) r.fail(where, fmt::format("token \"{}\" is not in the vocabulary", utf8::lossy(t)));
      return it->get<TokenId>();
    };
    impl->bpe.merges[Bpe::key(id_of(a), id_of(b))] = {static_cast<std::uint32_t>(k), id_of(a + b)};
  }

  if (const Json* added = r.optional(doc, "added_tokens")) {
    if (!added->is_array()) r.fail("added_tokens", "not an array");
    for (std::size_t k = 0; k < added->size(); ++k) {
      const std::string where = fmt::format("added_tokens[{}]", k);
      const Json& a = (*added)[k];
      AddedToken t{r.id(r.member(a, where, "id"), where + ".id"),
                   r.string(a, where, "content"),
                   r.boolean(a, where, "single_word", false),
                   r.boolean(a, where, "lstrip", false),
                   r.boolean(a, where, "rstrip", false),
                   r.boolean(a, where, "normalized", true),
                   r.boolean(a, where, "special", false)};
      if (t.content.empty()) r.fail(where + ".content", "empty");
      const auto slot = static_cast<std::size_t>(t.id);
      if (slot < impl->tokens.size() && impl->present[slot] && impl->tokens[slot] != t.content)
        impl->tokens[slot] = t.content;  // an added token takes its id over from the vocabulary
      place(t.id, t.content, where);
      impl->special[slot] = t.special;
      impl->added.push_back(std::move(t));
    }
  }
  // A normalized added token is looked for in the normalized text, as the normalizer writes
  // it ("▁<think>" after Prepend("▁")), and decodes to that form too, as in the library.
  for (std::size_t k = 0; k < impl->added.size(); ++k) {
    const AddedToken& t = impl->added[k];
    if (t.normalized) {
      const std::string normalized = normalize(impl->normalizer, t.content);
      impl->normalized_trie.add(normalized, k);
      impl->tokens[static_cast<std::size_t>(t.id)] = normalized;
    } else {
      impl->raw_trie.add(t.content, k);
    }
  }
  if (impl->tokens.empty()) r.fail("model.vocab", "no tokens");
  return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool parse_special) const {
  if (const std::size_t bad = utf8::first_invalid(text); bad != std::string_view::npos)
    throw std::invalid_argument(fmt::format("the text is not valid UTF-8: byte {} (0x{:02X}) at offset {}",
                                            bad, static_cast<unsigned char>(text[bad]), bad));
  std::vector<TokenId> out;
  std::unordered_map<std::string, std::vector<TokenId>> cache;  // words repeat in a prompt
  for (const Impl::Section& section : impl_->split_added(text, impl_->raw_trie, parse_special)) {
    if (section.added >= 0)
      out.push_back(impl_->added[static_cast<std::size_t>(section.added)].id);
    else
      impl_->encode_text(section.text, section.text.data() == text.data(), parse_special, out, cache);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  return impl_->decode(ids, skip_special, false);
}

TokenId Tokenizer::vocab_size() const { return static_cast<TokenId>(impl_->tokens.size()); }

std::optional<TokenId> Tokenizer::token_id(std::string_view token) const {
  const auto it = impl_->by_text.find(std::string(token));
  if (it == impl_->by_text.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::contains(TokenId id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->tokens.size() &&
         impl_->present[static_cast<std::size_t>(id)];
}

bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->special.size() && impl_->special[static_cast<std::size_t>(id)];
}

// ---- streaming ----------------------------------------------------------------------------

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

namespace {

// The text PENDING adds after CONTEXT: the decode of both less the decode of the context. Where
// the context's text is not a prefix (the ids joined a group of byte tokens that is not UTF-8
// as a whole, which the library replaces byte by byte), the pending ids' own text.
std::string added_text(const Tokenizer::Impl& impl, const std::vector<TokenId>& context,
                       const std::vector<TokenId>& pending, bool skip_special, bool hold_tail) {
  std::vector<TokenId> all = context;
  all.insert(all.end(), pending.begin(), pending.end());
  const std::string before = impl.decode(context, skip_special, false);
  std::string now = impl.decode(all, skip_special, hold_tail);
  if (now.starts_with(before)) return now.substr(before.size());
  return impl.decode(pending, skip_special, hold_tail);
}

}  // namespace

std::string StreamDecoder::push(TokenId id) {
  const Tokenizer::Impl& impl = *tokenizer_.impl_;
  impl.check_id(id);
  // A skipped special token is no part of decode's text (it leaves the ids before anything
  // else); kept as context, four of them would leave none that has text.
  if (skip_special_ && impl.special[static_cast<std::size_t>(id)]) return {};
  pending_.push_back(id);
  // Decoders such as Metaspace treat the first token apart, so the ids already emitted are
  // decoded again as context.
  const std::string added = added_text(impl, context_, pending_, skip_special_, true);
  if (utf8::incomplete_tail(added) > 0) return {};  // the character's last byte is still to come
  // A few ids of context suffice for every decoder here; the work stays linear in the ids. The
  // context is cut between batches only: a batch ends where the text is whole characters, so
  // the context never begins inside a character of byte tokens (its bytes alone are no UTF-8,
  // and decoded with them the next character's bytes would be U+FFFD).
  constexpr std::size_t kContext = 4;
  context_.insert(context_.end(), pending_.begin(), pending_.end());
  batches_.push_back(pending_.size());
  while (context_.size() - batches_.front() >= kContext) {
    context_.erase(context_.begin(), context_.begin() + static_cast<std::ptrdiff_t>(batches_.front()));
    batches_.erase(batches_.begin());
  }
  pending_.clear();
  return utf8::lossy(added);
}

std::string StreamDecoder::finish() {
  std::string out;
  if (!pending_.empty()) out = added_text(*tokenizer_.impl_, context_, pending_, skip_special_, false);
  context_.clear();
  batches_.clear();
  pending_.clear();
  return out;
}

}  // namespace mxmoe::text
