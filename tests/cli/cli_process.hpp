// Runs the built `mxmoe` executable for the CLI tests: a clean environment (so MXMOE_*
// variables of the developer's shell cannot change a verdict), stdout and stderr captured
// apart, the exit code. A scratch folder per test process, removed when the suite ends.
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_platform.hpp"

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
inline std::string shell_command(const std::string& env, const std::string& args,
                                 const std::string& shell_prefix) {
  return shell_prefix + " env -i PATH=/usr/bin:/bin " + env + " " + MXMOE_CLI_COMMAND + " " +
         args + " >" + (scratch_dir() / "out.txt").string() + " 2>" +
         (scratch_dir() / "err.txt").string();
}

inline Result run(const std::string& env, const std::string& args,
                  const std::string& shell_prefix = "") {
  const int status = std::system(shell_command(env, args, shell_prefix).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(scratch_dir() / "out.txt"),
          slurp(scratch_dir() / "err.txt")};
}

// run() in a child whose peak resident memory (ru_maxrss of it and every process it waited
// for: the shell, then mxmoe, which env execs) is returned in kB.
struct MeasuredResult : Result {
  long max_rss_kb = -1;
};

inline MeasuredResult run_measured(const std::string& env, const std::string& args,
                                   const std::string& shell_prefix = "") {
  const std::string cmd = shell_command(env, args, shell_prefix);
  MeasuredResult r;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  if (pid > 0 && ::wait4(pid, &status, 0, &usage) == pid) {
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.max_rss_kb = usage.ru_maxrss;
  }
  r.out = slurp(scratch_dir() / "out.txt");
  r.err = slurp(scratch_dir() / "err.txt");
  return r;
}

}  // namespace mxmoe::cli_testing
