// The layers of src/'s rooms, shared by the two layering tests: the include test
// (rooms_test.cpp) and the link-level test (links_test.cpp). Lower numbers are lower
// layers; rooms on one layer may not use each other. docs/ARCHITECTURE.md draws the picture.
#pragma once

#include <map>
#include <string>

namespace mxmoe::layout {

inline const std::map<std::string, int>& layers() {
  static const std::map<std::string, int> kLayers = {
      {"base", 0},    {"format", 1},   {"model", 2},   {"hw", 2},       {"io", 3},
      {"routing", 3}, {"contract", 4}, {"produce", 4}, {"backends", 5}, {"oracle", 6},
      {"runtime", 7}, {"verify", 8},   {"dist", 8},    {"text", 8},     {"llm", 9},
      {"perf", 10},   {"serve", 10},   {"capi", 11},   {"cli", 12},
  };
  return kLayers;
}

// True when room FROM may use room TO: itself, or a room of a lower layer.
inline bool may_use(const std::string& from, const std::string& to) {
  if (from == to) return true;
  const auto f = layers().find(from), t = layers().find(to);
  return f != layers().end() && t != layers().end() && t->second < f->second;
}

}  // namespace mxmoe::layout
