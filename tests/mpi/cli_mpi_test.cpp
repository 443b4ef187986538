// `mxmoe` under mpirun, as users run it (test_mpi_cli runs mpirun itself): the output of
// `mpirun -n N mxmoe run` has the bytes of `mxmoe run` alone; killing or stopping a rank ends
// the others non-zero within the deadline, naming the rank; a rank whose probe lacks the
// chosen backend's instructions gives one gathered report; explain and bench show the ranks.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "io/npy.hpp"
#include "io/v4_fixtures.hpp"
#include "mpi/family_checkpoints.hpp"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kMxmoe = MXMOE_CLI_PATH;
// As MXMOE_MPIRUN in tests/CMakeLists.txt: copy-in/copy-out shared memory, which needs no
// ptrace rights (containers).
const std::string kMpirun = std::string(MXMOE_MPIEXEC) +
                            " --oversubscribe --allow-run-as-root "
                            "--mca btl_vader_single_copy_mechanism none";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Result {
  int rc = -1;
  std::string out, err;
};

// Runs a shell command line, stdout and stderr to files.
Result sh(const std::string& command, const std::string& dir) {
  const std::string out = dir + "/stdout", err = dir + "/stderr";
  const int status = std::system((command + " >" + out + " 2>" + err).c_str());
  Result r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

class CliMpi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = (fs::temp_directory_path() / "mxmoe_cli_mpi_XXXXXX").string();
    root_ = new std::string(::mkdtemp(tmpl.data()));
    families_ = new std::vector<mpi_test::FamilyCheckpoint>(
        mpi_test::write_family_checkpoints(*root_, 16, 64, 64));
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*root_, ec);
    delete root_;
    delete families_;
  }
  void SetUp() override {
    if (!fs::exists(kMxmoe)) GTEST_SKIP() << "the mxmoe executable is not built";
  }
  static const std::string& root() { return *root_; }
  static const std::vector<mpi_test::FamilyCheckpoint>& families() { return *families_; }

 private:
  static std::string* root_;
  static std::vector<mpi_test::FamilyCheckpoint>* families_;
};
std::string* CliMpi::root_ = nullptr;
std::vector<mpi_test::FamilyCheckpoint>* CliMpi::families_ = nullptr;

TEST_F(CliMpi, RunUnderMpirunWritesTheBytesOfOneProcess) {
  const std::string x = root() + "/x.npy";
  const std::vector<float> input = mxmoe::testing_io::random_input(13, 64, 3);
  const std::int64_t shape[] = {13, 64};
  mxmoe::write_npy(x, input, shape);
  for (const auto& f : families()) {
    SCOPED_TRACE(f.name);
    const std::string alone = root() + "/" + f.name + "-1.npy";
    const std::string args = " run --model " + f.dir + " --layer 0 --input " + x + " --reps 1";
    const Result one = sh(kMxmoe + args + " --output " + alone, root());
    ASSERT_EQ(one.rc, 0) << one.err;
    for (int n : {2, 3, 4}) {
      const std::string path = root() + "/" + f.name + "-" + std::to_string(n) + ".npy";
      const Result group = sh(
          kMpirun + " -n " + std::to_string(n) + " " + kMxmoe + args + " --output " + path, root());
      ASSERT_EQ(group.rc, 0) << group.err;
      // Rank 0 prints the report on stdout, once, with every rank's line.
      EXPECT_THAT(group.out, HasSubstr("expert parallel: " + std::to_string(n) + " ranks"));
      EXPECT_THAT(group.out, HasSubstr("rank " + std::to_string(n - 1) + ": "));
      EXPECT_EQ(group.out.find("layer: ", group.out.find("layer: ") + 1), std::string::npos)
          << group.out;
      const std::string a = slurp(alone), b = slurp(path);
      ASSERT_FALSE(a.empty());
      EXPECT_TRUE(a == b) << n << " ranks: the output bytes differ from one process's";
    }
  }
}

// DeepSeek-V4 as DeepSeek publishes it (FP4 experts, FP8 shared expert, layer 0 hash-routed
// by token id, layer 1 routed): rank 0 reads the input and the tokens' ids.
TEST_F(CliMpi, DeepSeekV4ReleaseCheckpointKeepsItsBytesUnderMpirun) {
  const std::string dir = root() + "/deepseek-v4";
  fs::create_directories(dir);
  mxmoe::testing_io::V4Dims dims;
  dims.experts = 8;
  mxmoe::testing_io::write_v4_checkpoint(dir, dims, /*release=*/true);
  const std::string x = root() + "/v4-x.npy", ids = root() + "/v4-ids.npy";
  const std::vector<float> input = mxmoe::testing_io::random_input(9, dims.hidden, 5);
  const std::int64_t shape[] = {9, dims.hidden};
  mxmoe::write_npy(x, input, shape);
  mxmoe::testing_io::write_int_npy(ids, {3, 49, 0, 3, 17, 8, 8, 22, 41}, true);
  for (int layer : {0, 1}) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    const std::string args = " run --model " + dir + " --layer " + std::to_string(layer) +
                             " --input " + x + " --token-ids " + ids + " --reps 1";
    const std::string alone = root() + "/v4-" + std::to_string(layer) + "-1.npy";
    const Result one = sh(kMxmoe + args + " --output " + alone, root());
    ASSERT_EQ(one.rc, 0) << one.err;
    for (int n : {2, 3}) {
      const std::string path =
          root() + "/v4-" + std::to_string(layer) + "-" + std::to_string(n) + ".npy";
      const Result group = sh(
          kMpirun + " -n " + std::to_string(n) + " " + kMxmoe + args + " --output " + path, root());
      ASSERT_EQ(group.rc, 0) << group.err;
      const std::string a = slurp(alone), b = slurp(path);
      ASSERT_FALSE(a.empty());
      EXPECT_TRUE(a == b) << n << " ranks: the output bytes differ from one process's";
    }
  }
  // The hash layer with a real input and no ids: a usage error on rank 0, the job ends.
  const Result missing = sh(kMpirun + " -n 2 " + kMxmoe + " run --model " + dir +
                                " --layer 0 --reps 1 --input " + x + " --ep-deadline 5",
                            root());
  EXPECT_NE(missing.rc, 0);
  EXPECT_THAT(missing.err, HasSubstr("--token-ids"));
}

// The pids of mpirun's children running mxmoe, with their MPI ranks.
std::vector<std::pair<pid_t, int>> ranks_of(pid_t mpirun) {
  std::vector<std::pair<pid_t, int>> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::istringstream stat(slurp(entry.path().string() + "/stat"));
    std::string pid, comm, state;
    long ppid = 0;
    stat >> pid >> comm >> state >> ppid;
    if (ppid != mpirun || comm != "(mxmoe)") continue;
    const std::string environ = slurp(entry.path().string() + "/environ");
    const std::string key = std::string("OMPI_COMM_WORLD_RANK=");
    const auto at = environ.find(key);
    if (at == std::string::npos) continue;
    out.emplace_back(static_cast<pid_t>(std::stol(name)),
                     std::stoi(environ.substr(at + key.size())));
  }
  return out;
}

struct Killed {
  int status = 0;
  double seconds = 0;  // from the signal to mpirun's exit
  int rank = -1;
  std::string err;
};

// Starts `mpirun -n 3 mxmoe run` timing many calls, waits until the ranks compute, sends
// `signal` to the rank-2 process and measures how long the job takes to end.
Killed signal_a_rank_mid_run(const std::string& model, int signal, double deadline) {
  const std::string err = fs::temp_directory_path() / ("mxmoe_kill_" + std::to_string(getpid()));
  const std::string command = kMpirun + " -n 3 " + kMxmoe + " run --model " + model +
                              " --layer 0 --tokens 4 --reps 100000 --ep-deadline " +
                              std::to_string(deadline);
  const pid_t child = fork();
  if (child == 0) {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    ::dup2(fd, 1);
    ::setpgid(0, 0);
    ::execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  Killed k;
  // Running when rank 0 has said it starts the warm-up call (the timed calls follow).
  const auto started = Clock::now();
  std::vector<std::pair<pid_t, int>> ranks;
  while (Clock::now() - started < std::chrono::seconds(60)) {
    ranks = ranks_of(child);
    if (ranks.size() == 3 && slurp(err).find("warm-up call") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // mid-run
  for (const auto& [pid, rank] : ranks)
    if (rank == 2) {
      k.rank = rank;
      ::kill(pid, signal);
    }
  const auto t0 = Clock::now();
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (Clock::now() - t0 > std::chrono::seconds(static_cast<long>(deadline) + 60)) {
      ::kill(-child, SIGKILL);  // the test failed: do not leave a hung job behind
      ::waitpid(child, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  k.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  k.status = status;
  k.err = slurp(err);
  for (const auto& [pid, rank] : ranks) ::kill(pid, SIGKILL);  // none should be left
  fs::remove(err);
  return k;
}

bool failed(int status) {
  return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

TEST_F(CliMpi, KillingARankEndsTheOthersWithinTheDeadline) {
  const double deadline = 5;
  const Killed k = signal_a_rank_mid_run(families()[0].dir, SIGKILL, deadline);
  ASSERT_EQ(k.rank, 2) << k.err;
  EXPECT_TRUE(failed(k.status)) << k.err;
  EXPECT_LT(k.seconds, deadline + 5) << k.err;
  std::printf("killed rank 2 with SIGKILL: the job ended %.2f s later (deadline %.0f s)\n",
              k.seconds, deadline);
}

TEST_F(CliMpi, ARankThatStopsAnsweringIsNamedWithinTheDeadline) {
  const double deadline = 3;
  const Killed k = signal_a_rank_mid_run(families()[0].dir, SIGSTOP, deadline);
  ASSERT_EQ(k.rank, 2) << k.err;
  EXPECT_TRUE(failed(k.status)) << k.err;
  EXPECT_GE(k.seconds, deadline * 0.5) << k.err;
  EXPECT_LT(k.seconds, deadline + 10) << k.err;
  EXPECT_THAT(k.err, HasSubstr("rank 2 did not answer within 3.0 s")) << k.err;
  std::printf(
      "stopped rank 2 with SIGSTOP: the others named it and the job ended %.2f s later "
      "(deadline %.0f s)\n",
      k.seconds, deadline);
}

// `mpirun -n RANKS` of `mxmoe run --preset tiny --ep-deadline 3` where rank RANK runs SETUP (shell
// lines) before it starts mxmoe, under timeout(1) so that a hang fails the test; how long it took.
struct TimedJob {
  Result result;
  double seconds = 0;
};
TimedJob job_with_a_rank_set_up(const std::string& dir, int ranks, int rank,
                                const std::string& setup) {
  const std::string script = dir + "/rank_" + std::to_string(rank) + "_setup.sh";
  std::ofstream(script) << "#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" = " << rank << " ]; then\n"
                        << setup << "\nfi\nexec \"$@\"\n";
  fs::permissions(script, fs::perms::owner_all);
  const auto t0 = Clock::now();
  TimedJob job;
  job.result = sh("timeout -s KILL 100 " + kMpirun + " -n " + std::to_string(ranks) + " " + script +
                      " " + kMxmoe + " run --preset tiny --tokens 2 --reps 1 --ep-deadline 3",
                  dir);
  job.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return job;
}

// A rank that never reaches MPI_Init (it fails to start, or starts late): the others once
// waited inside MPI_Init until it came, past --ep-deadline (issue 38, finding 10). Now each
// ends at the deadline naming it, and mpirun ends the job. Rank 2 sleeps 120 s before it
// starts mxmoe.
TEST_F(CliMpi, ARankThatNeverStartsIsNamedAtTheDeadline) {
  const double deadline = 3;
  const TimedJob job = job_with_a_rank_set_up(root(), 3, 2, "sleep 120");
  EXPECT_EQ(job.result.rc, 1) << job.result.err;
  EXPECT_LT(job.seconds, deadline + 15) << job.result.err;
  EXPECT_GE(job.seconds, deadline * 0.9) << job.result.err;
  EXPECT_THAT(job.result.err, HasSubstr("error: rank 2 of the 3 that mpirun started did not reach "
                                        "MPI_Init within 3.0 s (--ep-deadline)"));
  std::printf("rank 2 never started: the job ended after %.2f s (deadline %.0f s)\n", job.seconds,
              deadline);
}

TEST_F(CliMpi, ARankWhoseProbeLacksTheBackendGivesOneGatheredReport) {
  const auto& f = families()[0];
  const std::string run = kMxmoe + " run --model " + f.dir + " --layer 0 --tokens 2 --reps 1";
  // Whatever backend this machine picks alone, rank 2 is capped below AVX2: only the reference
  // backend runs there. Forcing the machine's choice must fail with rank 2's reasons.
  const Result alone = sh(kMxmoe + " explain --model " + f.dir + " --layer 0 --json", root());
  ASSERT_EQ(alone.rc, 0) << alone.err;
  const std::string chosen = nlohmann::json::parse(alone.out).at("selected");
  if (chosen == "reference") GTEST_SKIP() << "this machine runs only the reference backend";
  const Result r = sh(kMpirun + " -n 2 " + run + " --backend " + chosen +
                          " : -n 1 env MXMOE_MAX_ISA=none " + run + " --backend " + chosen,
                      root());
  EXPECT_EQ(r.rc, 3) << r.err;
  const std::string all = r.out + r.err;
  EXPECT_THAT(all, HasSubstr("rank 2: " + chosen + " rejected: unsupported_isa"));
  EXPECT_THAT(all, Not(HasSubstr("rank 0: " + chosen + " rejected")));
  EXPECT_THAT(all, Not(HasSubstr("a rank failed")));
  // One report, printed once (by rank 0), with every rank's reasons.
  const std::string sentence =
      "No MXFP4 MoE backend supports the deployment configuration on every rank";
  const auto first = all.find(sentence);
  ASSERT_NE(first, std::string::npos) << all;
  EXPECT_EQ(all.find(sentence, first + 1), std::string::npos) << all;

  // Not forcing: only the judge-only reference backend runs on rank 2, which the oracle never
  // chooses unasked, so the group refuses; allowed, the group agrees on it and says why it
  // left the others.
  const Result refused =
      sh(kMpirun + " -n 2 " + run + " : -n 1 env MXMOE_MAX_ISA=none " + run, root());
  EXPECT_EQ(refused.rc, 3) << refused.err;
  EXPECT_THAT(refused.out + refused.err, HasSubstr("rank 2: avx2_fp32 rejected: unsupported_isa"));
  const Result agreed = sh(kMpirun + " -n 2 " + run + " --allow-reference : -n 1 env " +
                               "MXMOE_MAX_ISA=none " + run + " --allow-reference",
                           root());
  EXPECT_EQ(agreed.rc, 0) << agreed.err;
  EXPECT_THAT(agreed.out, HasSubstr("chosen: reference (agreed by 3 ranks"));
}

// Ranks launched unlike each other: different weights are refused (they would combine silently
// wrong outputs); a rank started with another command ends the job at once; a placement for
// another number of ranks is a usage error. None waits for its deadline (30 s by default).
TEST_F(CliMpi, RanksLaunchedUnlikeEachOtherAreRefusedPromptly) {
  const auto& f = families()[0];
  const std::string run = kMxmoe + " run --preset tiny --tokens 3 --reps 1";
  const auto timed = [&](const std::string& command) {
    const auto t0 = Clock::now();
    Result r = sh(command, root());
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_LT(s, 20.0) << command << " took " << s << " s";
    return r;
  };
  // The same flags, but `ckpt` in each rank's working directory holds other weights.
  for (const char* seed : {"1", "2"}) {
    const std::string dir = root() + "/seed" + seed;
    fs::create_directories(dir);
    ASSERT_EQ(
        sh(kMxmoe + " synth --preset tiny --seed " + seed + " --out " + dir + "/ckpt", root()).rc,
        0);
  }
  const std::string from_ckpt = kMxmoe + " run --model ckpt --layer 0 --tokens 3 --reps 1";
  Result r = timed(kMpirun + " -n 1 --wdir " + root() + "/seed1 " + from_ckpt + " : -n 1 --wdir " +
                   root() + "/seed2 " + from_ckpt);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("the ranks hold different weights"));
  // Flags given unlike rank 0's are named before any collective they would derail (they once
  // failed with "rank 0 sent 8 bytes where 12 were expected").
  r = timed(kMpirun + " -n 1 " + run + " : -n 1 " + run + " --seed 7");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("every rank takes the flags rank 0 was given"));
  EXPECT_THAT(r.err, HasSubstr("--seed is not given on rank 0 and '7' on rank 1"));
  // A rank's own thread count (hosts differ) is its own.
  r = timed(kMpirun + " -n 1 " + run + " --threads 1 : -n 1 " + run + " --threads 2");
  EXPECT_EQ(r.rc, 0) << r.err;
  r = timed(kMpirun + " -n 2 " + kMxmoe + " run --preset tiny --tokens 3 --reps 2 : -n 1 " +
            kMxmoe + " run --preset tiny --tokens 3 --reps 5");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--reps is '2' on rank 0 and '5' on rank 2"));
  r = timed(kMpirun + " -n 1 " + run + " --ep-deadline 5 : -n 1 " + run + " --ep-deadline 9");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--ep-deadline is '5' on rank 0 and '9' on rank 1"));
  r = timed(kMpirun + " -n 1 " + run + " : -n 1 " + kMxmoe +
            " bench --preset tiny --tokens 3 --reps 1");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("the command is 'run' on rank 0 and 'bench' on rank 1"));
  r = timed(kMpirun + " -n 1 " + kMxmoe + " run --model " + f.dir + " --layer 0 --tokens 2 " +
            "--reps 1 : -n 1 " + kMxmoe + " run --model " + f.dir +
            " --layer 1 --tokens 2 --reps 1");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--layer is '0' on rank 0 and '1' on rank 1"));
  r = timed(kMpirun + " -n 1 " + run + " --ep-deadline 30 : -n 1 " + kMxmoe +
            " explain --preset tiny");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("only run and bench are expert-parallel"));
  r = timed(kMpirun + " -n 2 " + kMxmoe + " explain --preset tiny --json");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("explain --ep-size N shows a group of N ranks"));
  const std::string table = root() + "/placement-3.json";
  std::ofstream(table) << R"({"ranks": 3, "owner": [0, 1, 2, 0, 1, 2, 0, 1]})";
  r = timed(kMpirun + " -n 2 " + run + " --placement " + table);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("places experts on 3 ranks; mpirun started 2"));
  r = timed(kMpirun + " -n 2 " + kMxmoe + " bench --preset tiny --tokens 1 --reps 2 --limits");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--limits under mpirun"));
}

// Issue 38: ranks compared only the layer's weights, so checkpoints whose config.json or
// safetensors headers differ (another quantization's settings, a dtype) were combined. Each
// rank's `ckpt` is a copy of one checkpoint with one difference; every rank refuses, naming
// the rank and what differs, and the same copies agree.
TEST_F(CliMpi, RanksWhoseCheckpointsDifferAreRefusedNamingWhatDiffers) {
  const std::string base = root() + "/differ";
  fs::create_directories(base + "/same");
  ASSERT_EQ(sh(kMxmoe + " synth --preset tiny --seed 3 --out " + base + "/same/ckpt", root()).rc,
            0);
  const auto variant = [&](const std::string& name, const std::string& file,
                           const std::string& from, const std::string& to) {
    fs::create_directories(base + "/" + name);
    fs::copy(base + "/same/ckpt", base + "/" + name + "/ckpt");
    const std::string path = base + "/" + name + "/ckpt/" + file;
    std::string text = slurp(path);
    const auto at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);  // the same length: offsets stay valid
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  };
  variant("config", "config.json", "\"torch_dtype\": \"bfloat16\"", "\"torch_dtype\": \"float16\"");
  variant("header", "model.safetensors", "gate_up_proj_blocks\":{\"dtype\":\"U8\"",
          "gate_up_proj_blocks\":{\"dtype\":\"I8\"");
  const std::string run = kMxmoe + " run --model ckpt --layer 0 --tokens 3 --reps 1";
  const auto pair = [&](const std::string& a, const std::string& b) {
    return sh(kMpirun + " -n 1 --wdir " + base + "/" + a + " " + run + " : -n 1 --wdir " + base +
                  "/" + b + " " + run,
              root());
  };
  Result r = pair("same", "config");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("config.json's 'torch_dtype' is \"bfloat16\" on rank 0 and "
                               "\"float16\" on rank 1"));
  r = pair("same", "header");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("their safetensors headers differ"));
  EXPECT_THAT(r.err, HasSubstr("tensor 'model.layers.0.mlp.experts.gate_up_proj_blocks' is 'U8 "
                               "[8,512,8,16] model.safetensors 8224 532512' on rank 0 and 'I8 "
                               "[8,512,8,16] model.safetensors 8224 532512' on rank 1"));
  r = pair("same", "same");
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST_F(CliMpi, ExplainShowsPerRankMemoryAndTheExpertParallelPredicates) {
  const auto& f = families()[1];  // DeepSeek: the shared expert is on every rank
  const Result r = sh(kMxmoe + " explain --model " + f.dir + " --layer 0 --ep-size 3", root());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("expert_parallel: ok"));
  for (const char* line : {"rank 0: 5 experts", "rank 1: 5 experts", "rank 2: 6 experts"})
    EXPECT_THAT(r.out, HasSubstr(line));
  const Result j =
      sh(kMxmoe + " explain --model " + f.dir + " --layer 0 --ep-size 3 --json", root());
  ASSERT_EQ(j.rc, 0) << j.err;
  const auto ep = nlohmann::json::parse(j.out).at("expert_parallel");
  ASSERT_EQ(ep.at("ranks").size(), 3u);
  std::uint64_t experts = 0;
  for (const auto& rank : ep.at("ranks")) experts += rank.at("expert_bytes").get<std::uint64_t>();
  // 16 experts of W1 [128, 64] + W2 [64, 64] in MXFP4 (17 bytes per 32 weights).
  EXPECT_EQ(experts, 16u * (128 * 64 + 64 * 64) / 32 * 17);
  // A rank outside the group is a usage error (exit 2); a placement table that does not fit
  // the layer is the expert_parallel predicate (exit 3, every backend says why).
  const Result bad =
      sh(kMxmoe + " explain --model " + f.dir + " --layer 0 --ep-size 2 --ep-rank 2", root());
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr("--ep-rank 2 is outside [0, --ep-size 2)"));
  const std::string short_table = root() + "/placement_short.json";
  std::ofstream(short_table) << R"({"ranks": 3, "owner": [0, 1, 2]})";
  const Result wrong =
      sh(kMxmoe + " explain --model " + f.dir + " --layer 0 --placement " + short_table, root());
  EXPECT_EQ(wrong.rc, 3) << wrong.err;
  EXPECT_THAT(wrong.out, HasSubstr("expert_parallel: the expert placement is invalid"));
  // A scattered table: expert e on rank e % 3 (6, 5, 5 experts), read from the file.
  std::string owners;
  for (int e = 0; e < 16; ++e) owners += (e ? ", " : "") + std::to_string(e % 3);
  const std::string scattered = root() + "/placement_scattered.json";
  std::ofstream(scattered) << R"({"ranks": 3, "owner": [)" + owners + "]}";
  const Result placed =
      sh(kMxmoe + " explain --model " + f.dir + " --layer 0 --placement " + scattered, root());
  ASSERT_EQ(placed.rc, 0) << placed.err;
  for (const char* line : {"rank 0: 6 experts", "rank 1: 5 experts", "rank 2: 5 experts"})
    EXPECT_THAT(placed.out, HasSubstr(line));
  const std::string garbage_file = root() + "/placement_garbage.json";
  std::ofstream(garbage_file) << R"({"ranks": 2, "owner": [0, 1)";
  const Result garbage = sh(kMxmoe + " explain --placement " + garbage_file, root());
  EXPECT_EQ(garbage.rc, 1);
  EXPECT_THAT(garbage.err, HasSubstr("--placement "));
}

TEST_F(CliMpi, BenchUnderMpirunReportsEveryRank) {
  const auto& f = families()[2];
  const Result r = sh(
      kMpirun + " -n 2 " + kMxmoe + " bench --model " + f.dir + " --layer 0 --tokens 1,8 --reps 3",
      root());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("expert parallel: "));
  EXPECT_THAT(r.out, HasSubstr("| 1 | 2 |"));
  EXPECT_THAT(r.out, HasSubstr("| 8 | 2 |"));
  EXPECT_THAT(r.out, HasSubstr("| 8 | 1 | 8 |"));  // tokens 8, rank 1, 8 of 16 experts
}

}  // namespace
