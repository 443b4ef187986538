// UTF-8 validation and lossy conversion (see utf8.hpp), after the Unicode standard's table of
// well-formed byte sequences (no overlongs, no surrogates, nothing above U+10FFFF).
#include "text/utf8.hpp"

#include <algorithm>

namespace mxmoe::text::utf8 {
namespace {

unsigned byte_at(std::string_view s, std::size_t i) { return static_cast<unsigned char>(s[i]); }

// The range the second byte of a sequence led by B must fall in, and the sequence's length;
// length 0 where B leads nothing.
struct Lead {
  std::size_t length;
  unsigned lo, hi;
};
Lead lead(unsigned b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes from S[i] are a valid prefix of a character (its whole length when
// complete); 0 where S[i] leads nothing.
std::size_t valid_prefix(std::string_view s, std::size_t i) {
  const Lead l = lead(byte_at(s, i));
  if (l.length <= 1) return l.length;
  std::size_t n = 1;
  while (n < l.length && i + n < s.size()) {
    const unsigned b = byte_at(s, i + n);
    const bool ok = n == 1 ? (b >= l.lo && b <= l.hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++n;
  }
  return n;
}

}  // namespace

std::size_t valid_char_length(std::string_view s, std::size_t i) {
  const std::size_t n = valid_prefix(s, i);
  return n == lead(byte_at(s, i)).length ? n : 0;
}

std::size_t first_invalid(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = valid_char_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = valid_char_length(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append(kReplacement);
      i += std::max<std::size_t>(1, valid_prefix(s, i));  // the maximal invalid subpart
    }
  }
  return out;
}

std::size_t incomplete_tail(std::string_view s) {
  for (std::size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const std::size_t i = s.size() - back;
    const Lead l = lead(byte_at(s, i));
    if (l.length > 1) return (l.length > back && valid_prefix(s, i) == back) ? back : 0;
    if (l.length == 1) return 0;
  }
  return 0;
}

char32_t decode_at(std::string_view s, std::size_t i, std::size_t len) {
  if (len == 1) return byte_at(s, i);
  char32_t cp = byte_at(s, i) & (0xFFu >> (len + 1));
  for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (byte_at(s, i + k) & 0x3F);
  return cp;
}

}  // namespace mxmoe::text::utf8
