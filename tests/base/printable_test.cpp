// The one escaping of file-, path- and variable-derived text in messages (base/printable.hpp).
#include "base/printable.hpp"

#include <gtest/gtest.h>

#include <string>

namespace mxmoe {
namespace {

TEST(Printable, EscapesNulAndControlBytesAndKeepsTheRest) {
  using namespace std::string_literals;
  EXPECT_EQ(printable("a\0b"s), "a\\x00b");
  EXPECT_EQ(printable("\x1b]0;title\x07\x1b[2J"), "\\x1b]0;title\\x07\\x1b[2J");
  EXPECT_EQ(printable("tab\tnl\ndel\x7f"), "tab\\x09nl\\x0adel\\x7f");
  EXPECT_EQ(printable("plain/path-1.json \\ \xc3\xa9"),
            "plain/path-1.json \\ \xc3\xa9");  // UTF-8 kept
}

TEST(Printable, AsciiEscapesEverythingElseAndTheBackslash) {
  EXPECT_EQ(printable_ascii("/v1/x?a=b&c"), "/v1/x?a=b&c");
  // 8-bit CSI, U+009B (C1 CSI) and a backslash: nothing that a terminal or a reader takes
  // for a control or for an escape made here.
  EXPECT_EQ(printable_ascii("/\x9b" "2J\xc2\x9b\\x1b \x7f"), "/\\x9b2J\\xc2\\x9b\\x5cx1b \\x7f");
}

}  // namespace
}  // namespace mxmoe
