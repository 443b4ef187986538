// The rooms of src/ form layers: a room may include its own headers, the public API
// (include/mxmoe) and rooms of lower layers, never a room above it. This reads every
// #include "room/..." line of src/ and fails on an edge that points up or sideways into
// an unknown room, so a back-edge cannot creep in (docs/ARCHITECTURE.md draws the picture).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// Lower numbers are lower layers. Rooms on one layer may not include each other.
const std::map<std::string, int>& layers() {
  static const std::map<std::string, int> kLayers = {
      {"base", 0},    {"format", 1}, {"model", 2},  {"hw", 2},      {"io", 3},
      {"routing", 3}, {"oracle", 4}, {"backends", 5}, {"runtime", 6}, {"verify", 7},
      {"dist", 7},    {"perf", 8},   {"capi", 9},   {"cli", 10},
  };
  return kLayers;
}

struct Edge {
  std::string file, from, to;
};

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
    while (std::getline(in, line)) {
      const std::string to = included_room(line);
      if (!to.empty() && to != "mxmoe")
        edges.push_back({fs::relative(entry.path(), src).string(), room, to});
    }
  }
  return edges;
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
          << " has no layer in tests/layout/rooms_test.cpp (and docs/ARCHITECTURE.md)";
  }
}

TEST(Rooms, IncludesOnlyPointDown) {
  const std::vector<Edge> edges = include_edges(fs::path(MXMOE_SOURCE_DIR) / "src");
  ASSERT_FALSE(edges.empty());
  int cross_room = 0;
  for (const Edge& e : edges) {
    if (e.from == e.to) continue;
    ++cross_room;
    const auto from = layers().find(e.from), to = layers().find(e.to);
    ASSERT_NE(from, layers().end()) << e.file;
    ASSERT_NE(to, layers().end()) << e.file << " includes from unknown room '" << e.to << "'";
    EXPECT_LT(to->second, from->second)
        << "src/" << e.file << " (" << e.from << ", layer " << from->second << ") includes "
        << e.to << " (layer " << to->second << "): rooms may only include lower layers";
  }
  EXPECT_GT(cross_room, 10);  // the scan saw the real tree
}

}  // namespace
