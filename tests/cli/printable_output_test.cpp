// Issue 38: text a command did not write itself (a directory's name, which becomes the layer's
// name; a hardware probe's model string; a path it reads or writes; the names of files it
// copies) reached the terminal raw in some outputs: the explain table, the `layer:`, `wrote`
// and `output:` lines, quantize's progress. Every command now prints through one path
// (cli::print, printable_message): this test runs each on hostile names and greps all it
// printed for a raw control byte.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_process.hpp"
#include "test_platform.hpp"

namespace mxmoe {
namespace {

using cli_testing::Result;
using cli_testing::run;
using cli_testing::scratch_dir;
namespace fs = std::filesystem;

// An OSC retitle, a bell and a clear screen: no quote, so it travels in '...' through /bin/sh.
const std::string kHostile = "\x1b]0;owned\x07\x1b[2J";

// Where TEXT holds a control byte other than a line break ("" when none), shown escaped.
std::string raw_control(const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f) {
      std::string around;
      for (std::size_t j = i < 40 ? 0 : i - 40; j < std::min(text.size(), i + 40); ++j) {
        const auto b = static_cast<unsigned char>(text[j]);
        if (b < 0x20 || b == 0x7f) {
          around += '<';
          around += std::to_string(b);
          around += '>';
        } else {
          around += text[j];
        }
      }
      return "raw byte " + std::to_string(c) + " at " + std::to_string(i) + ": ..." + around;
    }
  }
  return "";
}

std::string quoted(const fs::path& p) {
  std::string out(1, '\'');
  out += p.string();
  out += '\'';
  return out;
}

TEST(CliPrintable, NoCommandPrintsARawControlByte) {
  const fs::path root = scratch_dir() / "printable";
  fs::create_directories(root);
  const fs::path ck = root / ("ck" + kHostile);
  std::vector<std::pair<std::string, Result>> results;
  const auto command = [&](const std::string& args) {
    results.emplace_back(args, run("", args));
    return results.back().second;
  };
  const Result made = command(
      "synth --preset gpt-oss-20b --experts 8 --top-k 2 --hidden 64 --intermediate 96 "
      "--layers 1 --out " +
      quoted(ck));
  ASSERT_EQ(made.rc, 0) << made.err;
  EXPECT_THAT(made.err, ::testing::HasSubstr("\\x1b]0;owned\\x07"));  // shown, escaped

  // A hardware probe whose model string holds the escapes.
  const Result probe = run("", "info --hardware --json");
  ASSERT_EQ(probe.rc, 0) << probe.err;
  nlohmann::json hw = nlohmann::json::parse(probe.out);
  hw["model"] = "cpu" + kHostile;
  const fs::path hw_file = root / "hw.json";
  std::ofstream(hw_file) << hw.dump();
  // A file among the checkpoint's others (quantize copies it, naming it).
  std::ofstream(ck / ("notes" + kHostile + ".txt")) << "notes";

  const std::string model = " --model " + quoted(ck);
  for (const std::string& args :
       {"info --model " + quoted(ck), "info --hardware " + hw_file.string(),
        "explain" + model + " --hardware " + hw_file.string(),
        "explain --preset tiny --hardware " + hw_file.string(),
        "run" + model + " --tokens 2 --reps 1 --threads 1 --output " +
            quoted(root / ("y" + kHostile + ".npy")),
        "run" + model + " --tokens 2 --reps 1 --threads 1 --backend reference",
        "verify" + model + " --tokens 2",
        "quantize" + model + " --out " + quoted(root / ("q" + kHostile)),
        "synth --preset tiny --out " + quoted(ck)})  // refused: exists; the message names it
    command(args);
  for (const auto& [args, r] : results) {
    EXPECT_EQ(raw_control(r.out), "") << "stdout of mxmoe " << args;
    EXPECT_EQ(raw_control(r.err), "") << "stderr of mxmoe " << args;
  }
}

}  // namespace
}  // namespace mxmoe
