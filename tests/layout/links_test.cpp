// The rooms' layering as the linker sees it. The include test (rooms_test.cpp) reads
// #include lines, so a function declared in a low room's header and defined in a high room
// (the oracle's registered_backends(), defined by the registry above it) passed unseen while
// the link graph had a cycle. This test reads the symbol table of every object of the library
// (tests/CMakeLists.txt runs nm over them at build time): each symbol an object of room A
// needs and an object of room B defines is an edge A -> B, and B must be A or a lower room.
// Only strong definitions count: an inline function or a template instance (a weak symbol)
// is defined in every object that uses it, so it is no edge. There is no list of exceptions.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "layout/rooms.hpp"

namespace {

struct ObjectSymbols {
  std::string file;  // the source, relative to src/: "oracle/report.cpp"
  std::vector<std::string> defined;    // strong global definitions
  std::vector<std::string> undefined;  // what it needs from elsewhere
};

struct LinkEdge {
  std::string symbol, user, definer;  // files relative to src/
};

std::string room_of(const std::string& file) {
  return file.substr(0, file.find('/'));
}

// The source an object was compiled from, from CMake's object path
// ".../CMakeFiles/TARGET.dir/src/ROOM/NAME.cpp.o" (or ".dir/./src/..."): "ROOM/NAME.cpp"; ""
// when not under src/.
std::string source_of_object(const std::string& object) {
  std::size_t at = object.find(".dir/");
  if (at == std::string::npos) return {};
  at += 5;
  if (object.compare(at, 2, "./") == 0) at += 2;
  if (object.compare(at, 4, "src/") != 0) return {};
  std::string file = object.substr(at + 4);
  if (file.size() > 2 && file.compare(file.size() - 2, 2, ".o") == 0) file.resize(file.size() - 2);
  return file;
}

// nm's output for several objects: "\nPATH:\n" before each object's lines, each line
// "ADDRESS TYPE NAME" (the address blank for an undefined symbol; NAME demangled, spaces and
// all). Types T D B R G S (and i, an indirect function) are strong definitions; U undefined;
// the weak ones (W V u) and the local ones (lower case) are neither.
std::vector<ObjectSymbols> parse_nm(std::istream& in) {
  std::vector<ObjectSymbols> objects;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.back() == ':' && line.find(' ') == std::string::npos) {
      objects.push_back({source_of_object(line.substr(0, line.size() - 1)), {}, {}});
      continue;
    }
    if (objects.empty()) continue;
    // Past the address (or its blanks), one type letter, one space, the name.
    const std::size_t type_at = line.find_first_not_of(' ', line.find(' '));
    if (type_at == std::string::npos || type_at + 2 > line.size()) continue;
    const char type = line[type_at];
    std::string name = line.substr(type_at + 2);
    if (type == 'U') {
      objects.back().undefined.push_back(std::move(name));
    } else if (std::string_view("TDBRGSi").find(type) != std::string_view::npos) {
      objects.back().defined.push_back(std::move(name));
    }
  }
  std::erase_if(objects, [](const ObjectSymbols& o) { return o.file.empty(); });
  return objects;
}

// Every use of a symbol across rooms: {symbol, user, definer}.
std::vector<LinkEdge> cross_room_edges(const std::vector<ObjectSymbols>& objects) {
  std::map<std::string, const ObjectSymbols*> definer;
  for (const ObjectSymbols& o : objects)
    for (const std::string& s : o.defined) definer.emplace(s, &o);
  std::vector<LinkEdge> out;
  for (const ObjectSymbols& o : objects)
    for (const std::string& s : o.undefined) {
      const auto d = definer.find(s);
      if (d == definer.end()) continue;  // the standard library, fmt, the OS
      if (room_of(o.file) != room_of(d->second->file)) out.push_back({s, o.file, d->second->file});
    }
  return out;
}

// Those that do not point down.
std::vector<LinkEdge> link_violations(const std::vector<ObjectSymbols>& objects) {
  std::vector<LinkEdge> out = cross_room_edges(objects);
  std::erase_if(out, [](const LinkEdge& e) {
    return mxmoe::layout::may_use(room_of(e.user), room_of(e.definer));
  });
  return out;
}

std::string describe(const LinkEdge& v) {
  const std::string user = room_of(v.user), definer = room_of(v.definer);
  std::ostringstream text;
  text << "src/" << v.user << " (" << user << ", layer " << mxmoe::layout::layers().at(user)
       << ") uses " << v.symbol << ", defined in src/" << v.definer << " (" << definer
       << ", layer " << mxmoe::layout::layers().at(definer)
       << "): a room may only use lower layers";
  return text.str();
}

TEST(Links, ObjectPathsNameTheirSources) {
  EXPECT_EQ(source_of_object("/b/CMakeFiles/mxmoe_objects.dir/src/oracle/report.cpp.o"),
            "oracle/report.cpp");
  EXPECT_EQ(source_of_object("CMakeFiles/mxmoe_isa_integer_avx2.dir/src/backends/integer/kernels/"
                             "avx2/gemm.cpp.o"),
            "backends/integer/kernels/avx2/gemm.cpp");
  EXPECT_EQ(source_of_object("/b/CMakeFiles/mxmoe_objects.dir/./src/base/log.cpp.o"), "base/log.cpp");
  EXPECT_EQ(source_of_object("/b/tests/CMakeFiles/test_base.dir/base/json_test.cpp.o"), "");
}

TEST(Links, NmOutputParses) {
  std::istringstream nm(
      "\n/b/CMakeFiles/mxmoe_objects.dir/src/oracle/report.cpp.o:\n"
      "0000000000000000 T mxmoe::format_hardware_report[abi:cxx11](mxmoe::Hardware const&)\n"
      "                 U mxmoe::registered_backends()\n"
      "0000000000000000 W std::vector<int, std::allocator<int> >::~vector()\n"
      "0000000000000010 t (anonymous namespace)::join(std::string const&)\n"
      "\n/b/CMakeFiles/mxmoe_objects.dir/src/base/log.cpp.o:\n"
      "0000000000000000 B mxmoe::log_sink\n");
  const std::vector<ObjectSymbols> objects = parse_nm(nm);
  ASSERT_EQ(objects.size(), 2u);
  EXPECT_EQ(objects[0].file, "oracle/report.cpp");
  EXPECT_EQ(objects[0].defined, std::vector<std::string>{
                                    "mxmoe::format_hardware_report[abi:cxx11](mxmoe::Hardware "
                                    "const&)"});
  EXPECT_EQ(objects[0].undefined, std::vector<std::string>{"mxmoe::registered_backends()"});
  EXPECT_EQ(objects[1].defined, std::vector<std::string>{"mxmoe::log_sink"});
}

// The cycle this test was written for (issue 35): the oracle's report called the registry's
// registered_backends() while the registry's backends called the oracle's capability checks.
// The include test passed it. Whatever the layers, one edge of a cycle points up: this test
// names it (with the layers of today, the backends' use of the oracle, which is now above them;
// with those of then, the oracle's use of the registry).
TEST(Links, TheOracleRegistryCycleFails) {
  const std::vector<ObjectSymbols> objects = {
      {"oracle/report.cpp", {"mxmoe::format_hardware_report()"}, {"mxmoe::registered_backends()"}},
      {"oracle/capabilities.cpp", {"mxmoe::check_capabilities()"}, {}},
      {"backends/registry.cpp", {"mxmoe::registered_backends()"}, {"mxmoe::check_capabilities()"}},
      {"base/log.cpp", {"mxmoe::log_message()"}, {}},
      {"runtime/layer.cpp", {}, {"mxmoe::registered_backends()", "mxmoe::log_message()"}},
  };
  const std::vector<LinkEdge> found = link_violations(objects);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].symbol, "mxmoe::check_capabilities()");
  EXPECT_EQ(found[0].user, "backends/registry.cpp");
  EXPECT_EQ(found[0].definer, "oracle/capabilities.cpp");
  EXPECT_EQ(describe(found[0]),
            "src/backends/registry.cpp (backends, layer 5) uses mxmoe::check_capabilities(), "
            "defined in src/oracle/capabilities.cpp (oracle, layer 6): a room may only use "
            "lower layers");
}

TEST(Links, RoomsOfOneLayerMayNotUseEachOther) {
  const std::vector<ObjectSymbols> objects = {
      {"model/a.cpp", {"a()"}, {"b()"}},
      {"hw/b.cpp", {"b()"}, {}},
  };
  EXPECT_EQ(link_violations(objects).size(), 1u);
}

TEST(Links, SymbolsOnlyPointDown) {
  std::ifstream in(MXMOE_SYMBOL_TABLE);
  ASSERT_TRUE(in) << "no symbol table at " << MXMOE_SYMBOL_TABLE;
  const std::vector<ObjectSymbols> objects = parse_nm(in);
  for (const ObjectSymbols& o : objects)
    ASSERT_TRUE(mxmoe::layout::layers().count(room_of(o.file)))
        << "src/" << o.file << " is in no room of tests/layout/rooms.hpp";
  for (const LinkEdge& v : link_violations(objects)) ADD_FAILURE() << describe(v);
  EXPECT_GT(objects.size(), 100u);  // the table holds the real library
  EXPECT_GT(cross_room_edges(objects).size(), 200u);  // and the uses between its rooms
}

}  // namespace
