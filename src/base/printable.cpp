#include "base/printable.hpp"

namespace mxmoe {

namespace {

std::string escaped(std::string_view text, bool keep_line_breaks) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto byte = static_cast<unsigned char>(ch);
    if ((byte >= 0x20 && byte != 0x7f) || (keep_line_breaks && ch == '\n')) {
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
  return escaped(text, false);
}

std::string printable_message(std::string_view text) {
  return escaped(text, true);
}

}  // namespace mxmoe
