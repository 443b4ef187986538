// Runs the built `mxmoe` executable for the CLI tests: a clean environment (so MXMOE_*
// variables of the developer's shell cannot change a verdict), stdout and stderr captured
// apart, the exit code. A scratch folder per test process, removed when the suite ends.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace mxmoe::cli_testing {

struct Result {
  int rc = -1;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::filesystem::path scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("mxmoe_cli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Removes the scratch folder when the suite ends.
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(scratch_dir(), ec);
  }
};
inline const auto* const kScratchCleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

// `SHELL_PREFIX env -i PATH=/usr/bin:/bin ENV mxmoe ARGS` through /bin/sh (SHELL_PREFIX may
// set limits: "ulimit -f 16;"); mxmoe through the emulator when cross-compiled.
inline Result run(const std::string& env, const std::string& args,
                  const std::string& shell_prefix = "") {
  const auto out = scratch_dir() / "out.txt", err = scratch_dir() / "err.txt";
  const std::string cmd = shell_prefix + " env -i PATH=/usr/bin:/bin " + env + " " +
                          MXMOE_CLI_COMMAND + " " + args + " >" + out.string() + " 2>" +
                          err.string();
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

}  // namespace mxmoe::cli_testing
