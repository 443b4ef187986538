#include "base/printable.hpp"

namespace mxmoe {

namespace {

enum class Keep { utf8, utf8_and_line_breaks, ascii };

std::string escaped(std::string_view text, Keep keep) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto byte = static_cast<unsigned char>(ch);
    const bool kept = keep == Keep::ascii ? byte >= 0x20 && byte < 0x7f && ch != '\\'
                                          : (byte >= 0x20 && byte != 0x7f) ||
                                                (keep == Keep::utf8_and_line_breaks && ch == '\n');
    if (kept) {
      out += ch;
      continue;
    }
    out += "\\x";
    out += kHex[byte >> 4];
    out += kHex[byte & 0xf];
  }
  return out;
}

}  // namespace

std::string printable(std::string_view text) {
  return escaped(text, Keep::utf8);
}

std::string printable_message(std::string_view text) {
  return escaped(text, Keep::utf8_and_line_breaks);
}

std::string printable_ascii(std::string_view text) {
  return escaped(text, Keep::ascii);
}

}  // namespace mxmoe

