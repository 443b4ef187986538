// The rooms of src/ form layers: a room may include its own headers, the public API
// (include/mxmoe) and rooms of lower layers, never a room above it. This reads every
// #include "room/..." line of src/ and fails on an edge that points up or sideways into
// an unknown room, so a back-edge cannot creep in (docs/ARCHITECTURE.md draws the picture).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
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

std::vector<Edge> include_edges(const fs::path& src) {
  std::vector<Edge> edges;
  const std::regex include_line(R"(^\s*#\s*include\s+"([a-z0-9_]+)/)");
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext != ".cpp" && ext != ".hpp" && ext != ".inc") continue;
    const std::string room = fs::relative(entry.path(), src).begin()->string();
    std::ifstream in(entry.path());
    std::string line;
    std::smatch m;
    while (std::getline(in, line))
      if (std::regex_search(line, m, include_line) && m[1] != "mxmoe")
        edges.push_back({fs::relative(entry.path(), src).string(), room, m[1]});
  }
  return edges;
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
