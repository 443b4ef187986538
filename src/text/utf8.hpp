// UTF-8 facts the tokenizer needs: validation with the offset of the first bad byte, the
// length of a character, the lossy conversion (each maximal invalid subpart becomes U+FFFD,
// as Rust's from_utf8_lossy and the Unicode standard's recommended practice), and whether a
// byte string ends in the first bytes of a character still to come.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mxmoe::text::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the valid character at S[i], or 0 where S[i] starts no valid character.
std::size_t valid_char_length(std::string_view s, std::size_t i);

// The offset of the first byte that is not part of a valid character, or npos.
std::size_t first_invalid(std::string_view s);

// S with each maximal invalid subpart replaced by U+FFFD.
std::string lossy(std::string_view s);

// How many bytes at the end of S are a valid but incomplete character (0..3).
std::size_t incomplete_tail(std::string_view s);

// The code point of the valid character at S[i] (of length LEN).
char32_t decode_at(std::string_view s, std::size_t i, std::size_t len);

}  // namespace mxmoe::text::utf8
