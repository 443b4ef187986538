// GPT-2's byte-level alphabet: each of the 256 bytes as one printable Unicode character, the
// form byte-level BPE vocabularies are written in (space is "Ġ", U+0120). Shared by the
// tokenizer (src/text/) and the tokenizer a generated checkpoint carries (src/produce/full_model).
#pragma once

#include <array>
#include <string>

namespace mxmoe::byte_level {

// The code point of byte B: itself for the printable bytes (33..126, 161..172, 174..255),
// else 256, 257, ... in byte order.
inline std::array<unsigned, 256> code_points() {
  std::array<unsigned, 256> cp{};
  unsigned extra = 0;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    cp[b] = printable ? b : 256 + extra++;
  }
  return cp;
}

// UTF-8 of a code point below 0x800 (all the alphabet needs).
inline std::string utf8_below_0x800(unsigned cp) {
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
}

// The alphabet's character for each byte, as UTF-8.
inline std::array<std::string, 256> characters() {
  const std::array<unsigned, 256> cp = code_points();
  std::array<std::string, 256> out;
  for (unsigned b = 0; b < 256; ++b) out[b] = utf8_below_0x800(cp[b]);
  return out;
}

}  // namespace mxmoe::byte_level
