// The rooms of src/ form layers: a room may include its own headers and rooms of lower
// layers, never a room above it. Every public header (include/mxmoe) is owned by the room
// that implements it, so including it is an edge to that room like any other. This reads
// every #include "room/..." and #include "mxmoe/..." line of src/ and fails on an edge that
// points up or sideways, so a back-edge cannot creep in (docs/ARCHITECTURE.md draws the
// picture). There is no list of exceptions.
#include "layout/rooms.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;

using mxmoe::layout::layers;

// The room that owns (implements) each public header; an include of "mxmoe/NAME.hpp" is
// an edge to it.
const std::map<std::string, std::string>& header_owners() {
  static const std::map<std::string, std::string> kOwners = {
      {"build_info", "base"},    {"log", "base"},
      {"errors", "base"},
      {"export", "base"},        {"format", "format"},
      {"element_type", "format"},
      {"layer_spec", "model"},   {"weights", "model"},
      {"placement", "model"},    {"layer_from_tensors", "model"},
      {"hardware", "hw"},        {"checkpoint", "io"},
      {"generate", "produce"},
      {"deployment", "contract"}, {"oracle", "oracle"},
      {"reason_codes", "contract"},
      {"verdict", "contract"},
      {"selection", "oracle"},   {"judge", "oracle"},
      {"no_backend_error", "oracle"}, {"reports", "oracle"},
      {"registry", "backends"},
      {"runtime", "runtime"},    {"layer", "runtime"},
      {"model", "runtime"},      {"environment", "runtime"},
      {"edge_checks", "runtime"}, {"dense", "runtime"},
      {"communicator", "dist"},
      {"expert_parallel", "dist"},
      {"tokenizer", "text"},     {"llm", "llm"},
      {"mxmoe", "capi"},
  };
  return kOwners;
}

struct Edge {
  std::string file, from, to;
  std::string header;  // "" for a room include, else the public header's name
};

// The public header a quoted include names: `#include "mxmoe/NAME.hpp"` (or .h) -> "NAME".
std::string included_public_header(const std::string& line) {
  std::size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos || line[i] != '#') return {};
  i = line.find_first_not_of(" \t", i + 1);
  if (i == std::string::npos || line.compare(i, 7, "include") != 0) return {};
  i = line.find_first_not_of(" \t", i + 7);
  if (i == std::string::npos || line.compare(i, 7, "\"mxmoe/") != 0) return {};
  const std::size_t begin = i + 7;
  const std::size_t end = line.find('.', begin);
  if (end == std::string::npos || end == begin) return {};
  return line.substr(begin, end - begin);
}

// The room a quoted include names: `#include "room/..."` -> "room"; "" for anything else
// (system includes, includes without a folder). Hand-parsed: GCC 12's <regex> trips
// -Wmaybe-uninitialized in sanitizer builds.
std::string included_room(const std::string& line) {
  std::size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos || line[i] != '#') return {};
  i = line.find_first_not_of(" \t", i + 1);
  if (i == std::string::npos || line.compare(i, 7, "include") != 0) return {};
  i = line.find_first_not_of(" \t", i + 7);
  if (i == std::string::npos || line[i] != '"') return {};
  const std::size_t begin = i + 1;
  std::size_t end = begin;
  while (end < line.size() && ((line[end] >= 'a' && line[end] <= 'z') ||
                               (line[end] >= '0' && line[end] <= '9') || line[end] == '_'))
    ++end;
  if (end == begin || end >= line.size() || line[end] != '/') return {};
  return line.substr(begin, end - begin);
}

std::vector<Edge> include_edges(const fs::path& src) {
  std::vector<Edge> edges;
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext != ".cpp" && ext != ".hpp" && ext != ".inc") continue;
    const std::string room = fs::relative(entry.path(), src).begin()->string();
    std::ifstream in(entry.path());
    std::string line;
    const std::string file = fs::relative(entry.path(), src).string();
    while (std::getline(in, line)) {
      const std::string to = included_room(line);
      if (!to.empty() && to != "mxmoe") edges.push_back({file, room, to, ""});
      const std::string header = included_public_header(line);
      if (header.empty()) continue;
      const auto owner = header_owners().find(header);
      edges.push_back(
          {file, room, owner == header_owners().end() ? "?" + header : owner->second, header});
    }
  }
  return edges;
}

TEST(Rooms, PublicHeaderIncludesParse) {
  EXPECT_EQ(included_public_header("#include \"mxmoe/layer.hpp\""), "layer");
  EXPECT_EQ(included_public_header("  # include \"mxmoe/mxmoe.h\"  // C"), "mxmoe");
  EXPECT_EQ(included_public_header("#include \"base/json.hpp\""), "");
  EXPECT_EQ(included_public_header("// #include \"mxmoe/layer.hpp\""), "");
}

// Every public header has an owning room; the map names no header that does not exist.
TEST(Rooms, EveryPublicHeaderHasAnOwner) {
  std::set<std::string> present = {"build_info"};  // generated into the build tree
  for (const auto& entry :
       fs::directory_iterator(fs::path(MXMOE_SOURCE_DIR) / "include" / "mxmoe")) {
    const std::string name = entry.path().stem().string();
    present.insert(name);
    EXPECT_TRUE(header_owners().count(name))
        << entry.path() << " has no owning room in tests/layout/rooms_test.cpp";
  }
  for (const auto& [name, room] : header_owners()) {
    EXPECT_TRUE(present.count(name)) << "mxmoe/" << name << " is in the owner map but absent";
    EXPECT_TRUE(layers().count(room)) << name << " is owned by unknown room " << room;
  }
}

TEST(Rooms, IncludeLinesParse) {
  EXPECT_EQ(included_room("#include \"base/json.hpp\""), "base");
  EXPECT_EQ(included_room("  #  include   \"oracle/oracle.hpp\"  // why"), "oracle");
  EXPECT_EQ(included_room("#include \"kernel_isa.inc\""), "");
  EXPECT_EQ(included_room("#include <vector>"), "");
  EXPECT_EQ(included_room("// #include \"cli/x.hpp\""), "");
  EXPECT_EQ(included_room("#define include \"x/y\""), "");
}

TEST(Rooms, EveryRoomHasALayer) {
  for (const auto& entry : fs::directory_iterator(fs::path(MXMOE_SOURCE_DIR) / "src")) {
    if (!entry.is_directory()) continue;
    EXPECT_TRUE(layers().count(entry.path().filename().string()))
          << "src/" << entry.path().filename().string()
          << " has no layer in tests/layout/rooms.hpp (and docs/ARCHITECTURE.md)";
  }
}

TEST(Rooms, IncludesOnlyPointDown) {
  const std::vector<Edge> edges = include_edges(fs::path(MXMOE_SOURCE_DIR) / "src");
  ASSERT_FALSE(edges.empty());
  int cross_room = 0, through_headers = 0;
  for (const Edge& e : edges) {
    if (e.from == e.to) continue;
    ++cross_room;
    if (!e.header.empty()) ++through_headers;
    const auto from = layers().find(e.from), to = layers().find(e.to);
    ASSERT_NE(from, layers().end()) << e.file;
    ASSERT_NE(to, layers().end()) << e.file << " includes from unknown room '" << e.to << "'";
    if (to->second < from->second) continue;
    ADD_FAILURE() << "src/" << e.file << " (" << e.from << ", layer " << from->second
                  << ") includes " << (e.header.empty() ? e.to : "mxmoe/" + e.header + ", owned by " + e.to)
                  << " (layer " << to->second << "): rooms may only include lower layers";
  }
  EXPECT_GT(cross_room, 10);       // the scan saw the real tree
  EXPECT_GT(through_headers, 50);  // and the public headers
}

}  // namespace
