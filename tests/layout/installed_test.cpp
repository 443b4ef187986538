// The installed C++ surface stays narrow and closed (issue 35): include/mxmoe/ holds exactly the
// headers CMakeLists.txt installs (MXMOE_INSTALLED_HEADERS), docs/ARCHITECTURE.md gives each
// one's reason, and an installed header includes only installed and standard headers, declares
// no namespace-level type it does not define somewhere in the installed set, and befriends no
// type outside it. A header only src/ uses belongs in the room that owns it.
// (Downstream.InstalledPackage also compiles each installed header alone against the install.)
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path kInclude = fs::path(MXMOE_SOURCE_DIR) / "include" / "mxmoe";

std::set<std::string> installed() {
  std::set<std::string> names;
  std::istringstream in(MXMOE_INSTALLED_HEADERS);
  for (std::string name; in >> name;) names.insert(name);
  return names;
}

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The standard library's headers an installed header may include (C++20, and the C headers
// the C API uses).
const std::set<std::string>& standard_headers() {
  static const std::set<std::string> kStandard = {
      "algorithm", "any",           "array",         "atomic",     "bit",
      "bitset",    "cassert",       "cerrno",        "cfloat",     "charconv",
      "chrono",    "climits",       "cmath",         "compare",    "complex",
      "concepts",  "cstddef",       "cstdint",       "cstdio",     "cstdlib",
      "cstring",   "deque",         "exception",     "functional", "initializer_list",
      "iosfwd",    "iterator",      "limits",        "list",       "map",
      "memory",    "mutex",         "new",           "numeric",    "optional",
      "ranges",    "set",           "shared_mutex",  "span",       "stdexcept",
      "string",    "string_view",   "system_error",  "tuple",      "type_traits",
      "typeinfo",  "unordered_map", "unordered_set", "utility",    "variant",
      "vector",    "stdbool.h",     "stddef.h",      "stdint.h"};
  return kStandard;
}

// The target of an #include line: {'"', "mxmoe/x.hpp"} or {'<', "vector"}; {0, ""} for other lines.
std::pair<char, std::string> include_of(const std::string& line) {
  std::size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos || line[i] != '#') return {0, ""};
  i = line.find_first_not_of(" \t", i + 1);
  if (i == std::string::npos || line.compare(i, 7, "include") != 0) return {0, ""};
  i = line.find_first_not_of(" \t", i + 7);
  if (i == std::string::npos || (line[i] != '"' && line[i] != '<')) return {0, ""};
  const char close = line[i] == '"' ? '"' : '>';
  const std::size_t end = line.find(close, i + 1);
  if (end == std::string::npos) return {0, ""};
  return {line[i], line.substr(i + 1, end - i - 1)};
}

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

// The name a line declares without defining it at namespace level ("class Foo;", "struct
// Foo;", "enum class Foo : T;"), "" otherwise. Namespace-level lines start in column 0 (the
// style does not indent namespaces); an indented "struct Impl;" is a class's own pimpl.
std::string forward_declared(const std::string& line) {
  for (const char* kind : {"enum class ", "class ", "struct "}) {
    const std::string k = kind;
    if (line.rfind(k, 0) != 0) continue;
    std::size_t end = k.size();
    while (end < line.size() && is_name_char(line[end])) ++end;
    if (end == k.size() || line.find(';', end) == std::string::npos ||
        line.find('{') != std::string::npos)
      return "";
    return line.substr(k.size(), end - k.size());
  }
  return "";
}

// Whether LINE begins the definition of NAME as a class, struct or enum ("struct MXMOE_API
// Hardware {", "class Foo : public Bar {", or the head alone with its brace on the next line).
bool defines(const std::string& line, const std::string& name) {
  for (const char* kind : {"class ", "struct ", "class MXMOE_API ", "struct MXMOE_API "}) {
    const std::string head = std::string(kind) + name;
    for (std::size_t at = line.find(head); at != std::string::npos; at = line.find(head, at + 1)) {
      const std::size_t after = at + head.size();
      if ((at > 0 && is_name_char(line[at - 1])) ||
          (after < line.size() && is_name_char(line[after])))
        continue;
      const std::string rest = line.substr(after);
      if (rest.find('{') != std::string::npos || rest.find(';') == std::string::npos) return true;
    }
  }
  return false;
}

bool defined_in_installed(const std::string& name) {
  for (const std::string& header : installed())
    for (const std::string& line : lines_of(kInclude / header))
      if (defines(line, name)) return true;
  return false;
}

TEST(Installed, IncludeParse) {
  EXPECT_EQ(include_of("#include \"mxmoe/layer.hpp\""),
            std::make_pair('"', std::string("mxmoe/layer.hpp")));
  EXPECT_EQ(include_of("#  include <vector>  // why"), std::make_pair('<', std::string("vector")));
  EXPECT_EQ(include_of("// #include \"base/x.hpp\"").first, 0);
  EXPECT_EQ(forward_declared("class ThreadPool;"), "ThreadPool");
  EXPECT_EQ(forward_declared("enum class Mxfp4Decoder : std::uint8_t;"), "Mxfp4Decoder");
  EXPECT_EQ(forward_declared("  struct Impl;"), "");
  EXPECT_EQ(forward_declared("struct MXMOE_API Hardware {"), "");
  EXPECT_TRUE(defines("struct MXMOE_API Hardware {", "Hardware"));
  EXPECT_TRUE(
      defines("class MXMOE_API NoBackendError : public std::runtime_error {", "NoBackendError"));
  EXPECT_FALSE(defines("class ThreadPool;", "ThreadPool"));
  EXPECT_FALSE(defines("struct HardwareInfo {", "Hardware"));
}

// include/mxmoe/ holds the installed headers and nothing else, and the list names no header
// that is absent.
TEST(Installed, TheFolderIsTheInstalledList) {
  const std::set<std::string> list = installed();
  ASSERT_GT(list.size(), 10u);
  std::set<std::string> present;
  for (const auto& entry : fs::directory_iterator(kInclude)) {
    const std::string name = entry.path().filename().string();
    present.insert(name);
    EXPECT_TRUE(list.count(name))
        << "include/mxmoe/" << name << " is not installed (MXMOE_INSTALLED_HEADERS in "
        << "CMakeLists.txt): install it, with its reason in docs/ARCHITECTURE.md, or move it "
        << "into the src/ room that owns it";
  }
  for (const std::string& name : list)
    EXPECT_TRUE(present.count(name)) << name << " is installed but not in include/mxmoe/";
}

// docs/ARCHITECTURE.md's table of installed headers has one row per installed header.
TEST(Installed, EveryInstalledHeaderHasItsReason) {
  std::set<std::string> rows;
  for (const std::string& line :
       lines_of(fs::path(MXMOE_SOURCE_DIR) / "docs" / "ARCHITECTURE.md")) {
    if (line.rfind("| `mxmoe/", 0) != 0) continue;
    const std::size_t end = line.find('`', 3);
    if (end != std::string::npos) rows.insert(line.substr(9, end - 9));
  }
  const std::set<std::string> list = installed();
  for (const std::string& name : list)
    EXPECT_TRUE(rows.count(name)) << "docs/ARCHITECTURE.md has no row for mxmoe/" << name;
  for (const std::string& name : rows)
    EXPECT_TRUE(list.count(name)) << "docs/ARCHITECTURE.md has a row for mxmoe/" << name
                                  << ", which is not installed";
}

TEST(Installed, IncludesOnlyInstalledAndStandardHeaders) {
  const std::set<std::string> list = installed();
  for (const std::string& header : list)
    for (const std::string& line : lines_of(kInclude / header)) {
      const auto [kind, target] = include_of(line);
      if (kind == '"') {
        EXPECT_TRUE(target.rfind("mxmoe/", 0) == 0 && list.count(target.substr(6)))
            << "installed mxmoe/" << header << " includes \"" << target
            << "\", which is not installed";
      } else if (kind == '<') {
        EXPECT_TRUE(standard_headers().count(target))
            << "installed mxmoe/" << header << " includes <" << target
            << ">: the installed headers need the standard library alone";
      }
    }
}

// A namespace-level declaration of a type (class X;) must be of an installed type, and a
// friend must be one: a host cannot use a type whose definition is not installed, and naming
// one leaks the library's structure. (A class's own "struct Impl;" is its pimpl, not a leak.)
TEST(Installed, NamesOnlyInstalledTypes) {
  for (const std::string& header : installed())
    for (const std::string& line : lines_of(kInclude / header)) {
      const std::string declared = forward_declared(line);
      if (!declared.empty()) {
        EXPECT_TRUE(defined_in_installed(declared))
            << "installed mxmoe/" << header << " declares " << declared
            << ", which no installed header defines: `" << line << "`";
      }
      const std::size_t f = line.find("friend ");
      if (f == std::string::npos) continue;
      for (const char* kind : {"class ", "struct "}) {
        const std::string k = kind;
        if (line.compare(f + 7, k.size(), k) != 0) continue;
        std::string name = line.substr(f + 7 + k.size());
        name = name.substr(0, name.find(';'));
        EXPECT_TRUE(name.find("::") == std::string::npos && defined_in_installed(name))
            << "installed mxmoe/" << header << " befriends " << name
            << ", which is not an installed type: `" << line << "`";
      }
    }
}

}  // namespace
