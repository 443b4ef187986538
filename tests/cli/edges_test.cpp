// The edges of the `mxmoe` command, through the built binary: exit codes and messages for bad
// flags and variables, bounds, output files written whole or not at all (under `ulimit -f`,
// into an unwritable place), quantize under a real SIGINT, non-finite outputs, replayed
// hardware refused for running, the judge never chosen silently, one stream per kind of
// output, --json everywhere, the dispatch log on every selecting command.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "cli_process.hpp"
#include "io/io_fixtures.hpp"
#include "io/npy.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/runtime.hpp"

namespace mxmoe {
namespace {

namespace fs = std::filesystem;
using cli_testing::Result;
using cli_testing::run;
using cli_testing::slurp;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;
using testing_io::TempDir;

// No message leaks an implementation detail instead of naming the problem.
void expect_clean_message(const Result& r) {
  for (const char* raw : {"stoi", "bad_alloc", "std::", "A subcommand is required", "what()"})
    EXPECT_THAT(r.err, Not(HasSubstr(raw))) << r.err;
}

// --- exit codes and messages --------------------------------------------------------------

TEST(CliExitCodes, NoCommandOrAnUnknownOneIsUsage) {
  const Result none = run("", "");
  EXPECT_EQ(none.rc, 2);
  EXPECT_THAT(none.err, HasSubstr("a command is required: run, complete, chat, serve, explain"));
  const Result unknown = run("", "frobnicate --fast");
  EXPECT_EQ(unknown.rc, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown command 'frobnicate'; commands: run, complete, chat, serve, explain"));
  expect_clean_message(none);
  expect_clean_message(unknown);
}

TEST(CliExitCodes, HelpDocumentsTheExitCodesAndStreams) {
  const Result r = run("", "--help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_THAT(r.out, AllOf(HasSubstr("Exit codes: 0 ok; 1 runtime or input error"),
                           HasSubstr("2 usage error"), HasSubstr("3 no backend fits"),
                           HasSubstr("130 interrupted"), HasSubstr("stdout"),
                           HasSubstr("MXMOE_ALLOW_REFERENCE")));
  // One footer: the variables' line used to be overwritten by a second footer() call.
  EXPECT_THAT(r.out,
              HasSubstr("MXMOE_MAX_ISA=none|avx2|avx_vnni|avx512|amx|neon|dotprod|i8mm|sve"));
}

// Every bad flag or variable is a usage error (2) whose message names it and what is accepted.
TEST(CliExitCodes, BadFlagsAndVariablesNameThemselvesAndTheRange) {
  struct Case {
    const char* env;
    const char* args;
    const char* named;
  };
  const Case cases[] = {
      {"", "run --preset tiny --threads 100000", "--threads: Value 100000 not in range 0 to 1024"},
      {"", "run --preset tiny --threads abc", "--threads"},
      {"", "run --preset tiny --tokens 0", "--tokens"},
      {"", "run --preset tiny --tokens 2000000", "--tokens: Value 2000000 not in range"},
      {"", "run --preset tiny --reps 0", "--reps"},
      {"", "run --preset tiny --reps 100001", "--reps"},
      {"", "run --preset nope", "--preset: unknown preset 'nope'; valid: gpt-oss-20b"},
      {"", "explain --activation fp7", "--activation: unknown activation format 'fp7'"},
      {"", "explain --ep-size 2 --ep-rank 5", "--ep-rank 5 is outside [0, --ep-size 2)"},
      {"", "explain --exclude nope", "--exclude: unknown backend 'nope'"},
      // A flag's backend name is echoed printable, in the form every reader of one uses.
      {"", "explain --exclude \"$(printf 'no\\033pe')\"", "--exclude: unknown backend 'no\\x1bpe'"},
      {"", "bench --threads 100000", "--threads: '100000' is not an integer in [0, 1024]"},
      {"", "bench --tokens 1,x", "--tokens: 'x'"},
      {"", "bench --output json", "--output takes a file name"},
      {"", "verify --backend nope", "--backend: unknown backend 'nope'"},
      {"MXMOE_THREADS=100000", "explain", "MXMOE_THREADS=100000: expected an integer in [0, 1024]"},
      {"MXMOE_THREADS=abc", "explain", "MXMOE_THREADS=abc"},
      {"MXMOE_THREADS=-1", "explain", "MXMOE_THREADS=-1"},
      {"MXMOE_BATCH_INVARIANT=maybe", "explain", "MXMOE_BATCH_INVARIANT=maybe: not a boolean"},
      {"MXMOE_VERBOSE=everything", "explain", "MXMOE_VERBOSE=everything: unknown category"},
      {"MXMOE_BACKEND=nope", "explain", "MXMOE_BACKEND=nope: unknown backend 'nope'"},
      {"MXMOE_MAX_ISA=avx9", "info", "MXMOE_MAX_ISA=avx9"},
      {"MXMOE_ACTIVATION=fp7", "explain", "MXMOE_ACTIVATION=fp7"},
      {"MXMOE_EP_DEADLINE=0", "run --preset tiny", "MXMOE_EP_DEADLINE=0: expected seconds in"},
      {"", "run --preset tiny --ep-deadline 0", "--ep-deadline"},
      // NaN passes a plain range check; the variable's parser refuses it, and 1e-9 s.
      {"", "run --preset tiny --ep-deadline nan", "--ep-deadline=nan: expected seconds in"},
      {"MXMOE_EP_DEADLINE=1e-9", "run --preset tiny", "MXMOE_EP_DEADLINE=1e-9: expected seconds"},
      // An expert-parallel group needs mpirun: refused before any weight is generated.
      {"", "run --preset tiny --ep-size 2", "without mpirun"},
      // A --tokens that disagrees with --input's rows was silently ignored.
      {"", "run --preset tiny --tokens 5 --input /nonexistent/x.npy",
       "--tokens and --input exclude each other"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.env) + " mxmoe " + c.args);
    const Result r = run(c.env, c.args);
    EXPECT_EQ(r.rc, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.named));
    EXPECT_THAT(r.err, Not(HasSubstr("generating")));  // refused before any work
    expect_clean_message(r);
  }
}

// A wrong .npy dtype and a wrong .npy shape are one class: a bad input file (1).
TEST(CliExitCodes, WrongNpyDtypeAndWrongShapeAreTheSameClass) {
  TempDir dir;
  const std::vector<float> wrong_width(3 * 100, 0.5f);
  const std::int64_t shape[] = {3, 100};
  write_npy(dir / "shape.npy", wrong_width, shape);
  std::string f8 = slurp(dir / "shape.npy");
  f8.replace(f8.find("<f4"), 3, "<f8");
  testing_io::write_bytes(dir / "dtype.npy", f8);
  const Result bad_shape = run("", "run --preset tiny --input " + (dir / "shape.npy"));
  const Result bad_dtype = run("", "run --preset tiny --input " + (dir / "dtype.npy"));
  EXPECT_EQ(bad_shape.rc, 1);
  EXPECT_EQ(bad_dtype.rc, 1);
  EXPECT_THAT(bad_shape.err, HasSubstr("expected a float32 array of shape [M, 256]"));
  EXPECT_THAT(bad_dtype.err, HasSubstr("dtype '<f8' is not supported"));
}

// An input with NaN or Inf has no defined output: refused naming the file and the tokens,
// before any weight is generated (not a routing error deep inside the first call).
TEST(CliNonFinite, NonFiniteInputIsRefusedNamingTheFileAndTokens) {
  TempDir dir;
  std::vector<float> x(5 * 256, 0.25f);
  x[2 * 256 + 7] = std::numeric_limits<float>::quiet_NaN();
  x[4 * 256] = std::numeric_limits<float>::infinity();
  const std::int64_t shape[] = {5, 256};
  write_npy(dir / "x.npy", x, shape);
  const Result r = run("", "run --preset tiny --input " + (dir / "x.npy"));
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("x.npy"), HasSubstr("2 non-finite values (NaN/Inf) in 2 of 5 "
                                                         "tokens: token 2 (1), token 4 (1)")));
  EXPECT_THAT(r.err, Not(HasSubstr("generating")));
}

// --- bounds: threads, hardware files, FIFOs ---------------------------------------------

// A hardware file's logical_cpus is bounded like --threads (1..1024): a million no longer
// makes a pool of a million threads, 1e12 no longer wraps negative.
TEST(CliBounds, HardwareFileLogicalCpusIsBounded) {
  const Result probe = run("", "info --hardware --json");
  ASSERT_EQ(probe.rc, 0) << probe.err;
  for (const char* value : {"1000000", "1e12", "0"}) {
    Json h = Json::parse(probe.out);
    h["logical_cpus"] = Json::parse(value);
    TempDir dir;
    testing_io::write_bytes(dir / "hw.json", h.dump());
    const Result r = run("", "explain --hardware " + (dir / "hw.json"));
    EXPECT_EQ(r.rc, 1) << value;
    EXPECT_THAT(r.err, HasSubstr("\"logical_cpus\": expected an integer in [1, 1024]")) << value;
  }
}

// Only regular files are read: a FIFO or a device fails at once (a FIFO would otherwise
// block until a writer appears; /dev/zero would never end).
TEST(CliBounds, FifoAndDeviceInputsFailImmediately) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  const Result npy = run("", "run --preset tiny --input " + (dir / "fifo"));
  EXPECT_EQ(npy.rc, 1);
  EXPECT_THAT(npy.err, HasSubstr("not a regular file (a FIFO)"));
  const Result hw = run("", "explain --hardware /dev/zero");
  EXPECT_EQ(hw.rc, 1);
  EXPECT_THAT(hw.err, HasSubstr("/dev/zero: not a regular file (a character device)"));
  const Result hw_fifo = run("", "explain --hardware " + (dir / "fifo"));
  EXPECT_EQ(hw_fifo.rc, 1);
  EXPECT_THAT(hw_fifo.err, HasSubstr("not a regular file"));
}

// More threads than logical CPUs is allowed, with a warning on stderr (the library's log).
TEST(CliBounds, MoreThreadsThanCpusIsWarned) {
  MXMOE_REQUIRE_X86_BACKENDS();
  const int threads = default_thread_count() + 1;
  const Result r = run("", "run --preset tiny --reps 1 --threads " + std::to_string(threads));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("warning"), HasSubstr("logical CPUs")));
  EXPECT_THAT(r.out, HasSubstr(std::to_string(threads) + " threads"));
}

// A request whose memory would not fit is refused before allocating, naming the bytes.
// DeepSeek-V3's H = 7168: input + output alone are 60 GB at the largest call, far from what
// a 24 GB machine has (gpt-oss-20b's 24.2 GB sat at this machine's MemAvailable, which moves
// by a few hundred MB with the page cache: the test raced it and once saw the first check pass).
TEST(CliBounds, RequestThatDoesNotFitInMemoryIsRefusedNamingTheBytes) {
  const double need = 1048576.0 * 7168 * 4 * 2;  // input + output alone
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (meminfo >> key >> kb && key != "MemAvailable:") meminfo.ignore(1000, '\n');
  if (kb * 1024 > need) GTEST_SKIP() << "this machine could hold the request";
  const Result r = run("", "run --preset deepseek-v3 --reps 1 --tokens 1048576");
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("needs"), HasSubstr("bytes: input"), HasSubstr("output"),
                           HasSubstr("MemAvailable")));
  EXPECT_THAT(r.err, Not(HasSubstr("generating")));  // before any weight is made
  expect_clean_message(r);
}

// --- output files: whole or not at all ----------------------------------------------------

TEST(CliOutput, UnwritableOutputFailsBeforeAnyWorkWithTheOsReason) {
  const Result r = run("", "run --preset gpt-oss-20b --output /nonexistent_dir/y.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot create /nonexistent_dir/y.npy: No such file or directory"));
  EXPECT_THAT(r.err, Not(HasSubstr("generating")));
  const Result bench = run("", "bench --preset tiny --output /nonexistent_dir/b.md");
  EXPECT_EQ(bench.rc, 1);
  EXPECT_THAT(bench.err, HasSubstr("cannot create /nonexistent_dir/b.md"));
  EXPECT_THAT(bench.err, Not(HasSubstr("measuring")));
}

// A write that fails half way (here the file size limit of `ulimit -f`, which also raises
// SIGXFSZ) leaves the existing file byte-identical and no temporary beside it.
TEST(CliOutput, FailedWriteUnderUlimitKeepsTheExistingFile) {
  MXMOE_REQUIRE_X86_BACKENDS();
  TempDir dir;
  const std::string old = std::string(3000, 'k');
  testing_io::write_bytes(dir / "y.npy", old);
  // 256 tokens x 256 floats = 256 KiB of output; the limit is 16 KiB.
  const Result r = run("", "run --preset tiny --reps 1 --tokens 256 --output " + (dir / "y.npy"),
                       "ulimit -f 16;");
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("cannot write"), HasSubstr("File too large")));
  EXPECT_EQ(slurp(dir / "y.npy"), old);
  EXPECT_EQ(testing_io::temporaries_in(dir.path()), 0);
  // Without the limit the same command replaces it whole.
  const Result ok = run("", "run --preset tiny --reps 1 --tokens 256 --output " + (dir / "y.npy"));
  ASSERT_EQ(ok.rc, 0) << ok.err;
  EXPECT_EQ(read_npy(dir / "y.npy").shape, (std::vector<std::int64_t>{256, 256}));
}

// --- quantize and generate under a real SIGINT ----------------------------------------------

struct Interrupted {
  int status = 0;
  std::string err;
};

// Runs `mxmoe ARGS` with a stderr pipe that has ROOM bytes free, so the child blocks writing
// the first line that does not fit: after it wrote FILE into the temporary directory beside
// ROOT/out, long before it could finish. SIGINT then arrives mid-write, deterministically.
Interrupted interrupt_mid_write(const std::string& args, const std::string& root,
                                const std::string& file, std::size_t room) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  (void)::fcntl(fds[1], F_SETPIPE_SZ, 4096);
  const std::string fill(4096 - room, 'x');  // one page: the next write that does not fit waits
  EXPECT_EQ(::write(fds[1], fill.data(), fill.size()), static_cast<ssize_t>(fill.size()));
  const pid_t pid = ::fork();
  EXPECT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(fds[1], 2);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::close(fds[0]);
    char* const env[] = {const_cast<char*>("PATH=/usr/bin:/bin"), nullptr};
    // exec: the shell becomes mxmoe (through the emulator when cross-compiled), same pid.
    const std::string command = std::string("exec ") + MXMOE_CLI_COMMAND + " " + args;
    ::execle("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr), env);
    ::_exit(127);
  }
  ::close(fds[1]);
  bool mid_write = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!mid_write && std::chrono::steady_clock::now() < deadline) {
    for (const auto& e : fs::directory_iterator(root))
      if (e.path().filename().string().rfind(".out.mxmoe-tmp-", 0) == 0 &&
          fs::exists(e.path() / file))
        mid_write = true;
    if (!mid_write) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(mid_write) << file << " never appeared";
  EXPECT_EQ(::kill(pid, SIGINT), 0);
  Interrupted r;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;)
    r.err.append(buffer, static_cast<std::size_t>(n));
  ::close(fds[0]);
  EXPECT_EQ(::waitpid(pid, &r.status, 0), pid);
  return r;
}

void expect_interrupted(const Interrupted& r, const std::string& out,
                        const std::map<std::string, std::string>& before, const std::string& root) {
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 130);
  EXPECT_THAT(r.err, HasSubstr("interrupted; " + out + " is left as it was"));
  EXPECT_EQ(testing_io::directory_snapshot(out), before);
  EXPECT_EQ(testing_io::temporaries_in(root), 0);
}

TEST(CliQuantize, SigintMidConversionKeepsThePreviousOutput) {
  MXMOE_SKIP_UNDER_EMULATOR();
  TempDir root;
  const std::string in = root / "in", out = root / "out";
  fs::create_directories(in);
  std::vector<std::vector<std::uint8_t>> keep;
  testing_io::write_bf16_mixtral(in, keep, 6, 1);
  const Result first = run("", "quantize --model " + in + " --out " + out);
  ASSERT_EQ(first.rc, 0) << first.err;
  const auto before = testing_io::directory_snapshot(out);
  // Its first line of progress comes after layer 0's shard.
  expect_interrupted(interrupt_mid_write(
                         "quantize --model " + in + " --out " + out + " --scale-rule floor --force",
                         root.path(), "model-00001-of-00006.safetensors", 0),
                     out, before, root.path());
}

// synth --full announces its size, writes the shard, then blocks on the shard's line: the
// pipe has room for the announcement only. Ctrl-C there deletes what was written (exit 130).
TEST(CliGenerate, SigintMidWriteKeepsThePreviousOutput) {
  MXMOE_SKIP_UNDER_EMULATOR();
  TempDir root;
  const std::string out = root / "out";
  const std::string args =
      "synth --preset tiny --full --layers 2 --heads 4 --kv-heads 2 --head-dim 16 --vocab 512 "
      "--out " +
      out;
  const Result first = run("", args);
  ASSERT_EQ(first.rc, 0) << first.err;
  EXPECT_THAT(first.err, HasSubstr("(100%)"));
  const auto before = testing_io::directory_snapshot(out);
  const std::string announced = first.err.substr(0, first.err.find('\n') + 1);
  ASSERT_THAT(announced, HasSubstr("of tensors"));
  expect_interrupted(interrupt_mid_write(args + " --seed 5 --force", root.path(),
                                         "model-00001-of-00001.safetensors", announced.size()),
                     out, before, root.path());
}

// --- no silent wrong answer ---------------------------------------------------------------

// A gpt-oss checkpoint whose every E8M0 scale byte is SCALE (254 is legal and overflows).
void write_scaled_checkpoint(const std::string& dir, std::uint8_t scale) {
  const testing_io::Dims d;
  testing_io::GptOssLayer layer = testing_io::random_gpt_oss_layer(d, 3);
  for (auto* scales : {&layer.w1_scales, &layer.w2_scales})
    std::fill(scales->begin(), scales->end(), scale);
  testing_io::Dims one = d;
  one.layers = 1;
  testing_io::write_config(dir, testing_io::gpt_oss_config(one));
  write_safetensors(dir + "/model.safetensors", testing_io::gpt_oss_tensors(one, 0, layer));
}

TEST(CliNonFinite, RunAndVerifyReportNonFiniteOutputsAndInfoWarns) {
  MXMOE_REQUIRE_X86_BACKENDS();
  TempDir dir, io;
  write_scaled_checkpoint(dir.path(), 254);
  testing_io::write_bytes(io / "y.npy", "previous");
  const Result r =
      run("", "run --model " + dir.path() + " --layer 0 --tokens 7 --output " + (io / "y.npy"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("non-finite value"), HasSubstr("of 7 tokens: token 0 ("),
                           HasSubstr("--output was not written")));
  EXPECT_EQ(slurp(io / "y.npy"), "previous");

  const Result v = run("", "verify --model " + dir.path() +
                               " --layer 0 --backend avx2 "
                               "--activation f32");
  EXPECT_EQ(v.rc, 1);
  EXPECT_THAT(v.err, HasSubstr("non-finite value"));
  EXPECT_THAT(v.out, HasSubstr("FAIL"));

  const Result info = run("", "info --model " + dir.path() + " --json");
  EXPECT_EQ(info.rc, 0) << info.err;
  EXPECT_THAT(info.err, AllOf(HasSubstr("warning: layer 0"), HasSubstr("beyond float32")));
  const Json j = Json::parse(info.out);
  EXPECT_EQ(j["per_layer"][0]["status"], "ok");
  EXPECT_FALSE(j["warnings"].empty());
}

// A layer with a NaN scale byte (0xFF) is never reported "ok".
TEST(CliNonFinite, InfoNeverCallsALayerWithANanScaleOk) {
  TempDir dir;
  write_scaled_checkpoint(dir.path(), 0xFF);
  const Result info = run("", "info --model " + dir.path() + " --json");
  EXPECT_EQ(info.rc, 1);
  const Json j = Json::parse(info.out);
  EXPECT_EQ(j["per_layer"][0]["status"], "error");
  EXPECT_THAT(j["per_layer"][0]["found"].get<std::string>(), HasSubstr("0xFF"));
}

// A probe captured on a machine with AMX, replayed here: explain selects from it, but run
// never executes a kernel this CPU cannot run (exit 3, saying why), and verify skips it.
TEST(CliReplay, ReplayedHardwareIsRefusedForRunningWhatThisCpuLacks) {
  MXMOE_REQUIRE_X86_BACKENDS();
  const Hardware live = probe_hardware();
  if (live.isa.amx_int8 && live.isa.amx_tile) GTEST_SKIP() << "this CPU has AMX";
  Hardware h = live;
  for (const char* f : {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
                        "avx512_vnni", "amx_tile", "amx_int8", "amx_bf16"})
    set_isa_feature(h.isa, f, true);
  h.os_denied.clear();
  TempDir dir;
  testing_io::write_bytes(dir / "sapphire.json", to_json(h));
  const std::string replay = " --hardware " + (dir / "sapphire.json");

  const Result explain =
      run("", "explain --preset tiny --backend amx_int8 --activation int8" + replay);
  EXPECT_EQ(explain.rc, 0) << explain.err;
  const Result r = run("", "run --preset tiny --backend amx_int8 --activation int8" + replay);
  EXPECT_EQ(r.rc, 3);
  EXPECT_THAT(r.err, AllOf(HasSubstr("selects amx_int8, but this machine cannot run it"),
                           HasSubstr("unsupported_isa"), HasSubstr("mxmoe explain")));
  EXPECT_THAT(r.err, Not(HasSubstr("warm-up")));
  const Result v = run("", "verify --preset tiny --backend amx_int8 --activation int8" + replay);
  EXPECT_EQ(v.rc, 1);
  EXPECT_THAT(v.out, HasSubstr("on this machine (not the replayed probe)"));
}

// The judge (reference, ~1.6 s per gpt-oss-20b call) is never chosen silently: the request
// only it can serve is exit 3 with a suggestion naming it; allowed or forced, it runs. With
// the probe capped at AVX2, batch-invariant MXFP8 has no fast backend (avx512_bf16 and
// amx_bf16 serve it where they run).
TEST(CliReference, NeverAutoSelectedButAllowedOrForced) {
  const std::string avx2 = "MXMOE_MAX_ISA=avx2";
  const Result r = run(avx2, "explain --activation mxfp8 --batch-invariant");
  EXPECT_EQ(r.rc, 3);
  EXPECT_THAT(r.err,
              AllOf(HasSubstr("reference_only"),
                    HasSubstr("allow_reference=true would allow reference (--allow-reference")));
  EXPECT_THAT(r.out, HasSubstr("suggestion: allow_reference=true would allow reference"));
  const Result allowed = run(avx2,
                             "explain --json --activation mxfp8 --batch-invariant "
                             "--allow-reference");
  EXPECT_EQ(allowed.rc, 0);
  EXPECT_EQ(Json::parse(allowed.out)["selected"], "reference");
  const Result from_env = run(avx2 + " MXMOE_ALLOW_REFERENCE=1",
                              "explain --json --activation mxfp8 "
                              "--batch-invariant");
  EXPECT_EQ(Json::parse(from_env.out)["selected"], "reference");
  const Result forced = run("",
                            "explain --json --activation mxfp8 --batch-invariant "
                            "--backend reference");
  EXPECT_EQ(Json::parse(forced.out)["selected"], "reference");
}

// --- one stream per kind of output, --json everywhere, the dispatch log ---------------------

// stdout carries the result, in both preset and --model runs; stderr only progress.
TEST(CliStreams, RunReportsOnStdoutForPresetsAndModels) {
  MXMOE_REQUIRE_X86_BACKENDS();
  const Result preset = run("", "run --preset tiny --reps 1");
  ASSERT_EQ(preset.rc, 0) << preset.err;
  EXPECT_THAT(preset.out, AllOf(HasSubstr("chosen:"), HasSubstr("time:")));
  EXPECT_THAT(preset.err, Not(HasSubstr("chosen:")));
  TempDir dir;
  testing_io::write_gpt_oss_checkpoint(dir.path(), testing_io::Dims{}, /*sharded=*/false);
  const Result model = run("", "run --model " + dir.path() + " --layer 1 --reps 1");
  ASSERT_EQ(model.rc, 0) << model.err;
  EXPECT_THAT(model.out, AllOf(HasSubstr("chosen:"), HasSubstr("time:")));
  EXPECT_THAT(model.err, Not(HasSubstr("chosen:")));
}

// Every reporting command speaks --json: one document on stdout.
TEST(CliStreams, EveryReportingCommandHasJson) {
  MXMOE_REQUIRE_X86_BACKENDS();
  TempDir dir;
  testing_io::write_gpt_oss_checkpoint(dir.path(), testing_io::Dims{}, /*sharded=*/false);
  const std::string commands[] = {
      "run --preset tiny --reps 1 --json",
      "explain --preset tiny --json",
      "info --hardware --json",
      "info --model " + dir.path() + " --json",
      "verify --preset tiny --backend avx2 --activation f32 --json",
      "backends --json",
      "bench --preset tiny --tokens 1 --reps 1 --cache-resident --threads 1 --json",
  };
  for (const std::string& c : commands) {
    SCOPED_TRACE(c);
    const Result r = run("", c);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(Json::accept(r.out)) << r.out;
  }
  const Json run_json = Json::parse(run("", "run --preset tiny --reps 1 --json").out);
  EXPECT_TRUE(run_json.contains("chosen") && run_json.contains("us_per_call_median"));
}

// bench --threads 0 means what run --threads 0 means: every logical CPU.
TEST(CliStreams, BenchThreadsZeroIsAllCpusAsForRun) {
  MXMOE_REQUIRE_X86_BACKENDS();
  const Result r =
      run("", "bench --preset tiny --tokens 1 --reps 1 --cache-resident --threads 0 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_FALSE(j["results"].empty());
  EXPECT_EQ(j["results"][0]["threads"], default_thread_count());
  const Json run_json = Json::parse(run("", "run --preset tiny --reps 1 --threads 0 --json").out);
  EXPECT_EQ(run_json["threads"], default_thread_count());
}

// MXMOE_VERBOSE=dispatch prints the selection on every command that selects.
TEST(CliStreams, VerboseDispatchOnEverySelectingCommand) {
  MXMOE_REQUIRE_X86_BACKENDS();
  for (const char* c : {"run --preset tiny --reps 1", "explain --preset tiny",
                        "verify --preset tiny --backend avx2 --activation f32",
                        "bench --preset tiny --tokens 1 --reps 1 --cache-resident --threads 1"}) {
    SCOPED_TRACE(c);
    const Result r = run("MXMOE_VERBOSE=dispatch", c);
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("mxmoe dispatch: reference:"));
    EXPECT_THAT(r.out, Not(HasSubstr("mxmoe dispatch")));
  }
}

// verify shows progress on stderr and each result as a line on stdout; the default invariance
// sweep is the short one (the reference's sweep only with --thorough).
TEST(CliVerify, ProgressAndOneLinePerResult) {
  MXMOE_REQUIRE_X86_BACKENDS();
  const Result r = run("", "verify --preset tiny --batch-invariant --activation bf16");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.err,
              AllOf(HasSubstr("mxmoe verify: ["), HasSubstr("batch invariance over 24 tokens")));
  EXPECT_THAT(r.out, HasSubstr("identical bits"));
  EXPECT_THAT(r.out, HasSubstr("not swept (reference"));
  const std::regex result_line("\\n(avx2_fp32|avx512_bf16) +bf16 .*pass");
  EXPECT_TRUE(std::regex_search(r.out, result_line)) << r.out;
}

// The README's examples work as written: every `build/mxmoe ...` line names a command that
// exists, every repository file it names exists, and the cheap ones run.
TEST(CliReadme, ExamplesWorkAsWritten) {
  const std::string readme = slurp(fs::path(MXMOE_SOURCE_DIR) / "README.md");
  const std::regex line("(^|\\n)build/mxmoe ([^#\\n]*)");
  int examples = 0;
  for (auto it = std::sregex_iterator(readme.begin(), readme.end(), line);
       it != std::sregex_iterator(); ++it) {
    std::string args = (*it)[2].str();
    while (!args.empty() && args.back() == ' ') args.pop_back();
    SCOPED_TRACE(args);
    ++examples;
    const std::regex repo_file("(examples/[^ ]+)");
    for (auto f = std::sregex_iterator(args.begin(), args.end(), repo_file);
         f != std::sregex_iterator(); ++f)
      EXPECT_TRUE(fs::exists(fs::path(MXMOE_SOURCE_DIR) / (*f)[1].str())) << (*f)[1].str();
    const std::string command = args.substr(0, args.find(' '));
    const Result help = run("", command + " --help");
    EXPECT_EQ(help.rc, 0) << command;
    const bool cheap = command == "explain" || command == "backends" ||
                       (command == "info" && args.find("--model") == std::string::npos);
    if (!cheap) continue;
    std::string runnable = std::regex_replace(args, std::regex(" *>.*$"), "");
    runnable = std::regex_replace(runnable, std::regex("examples/"),
                                  std::string(MXMOE_SOURCE_DIR) + "/examples/");
    const Result r = run("", runnable);
    EXPECT_TRUE(r.rc == 0 || r.rc == 3) << r.err;  // explain exits 3 when nothing fits
  }
  EXPECT_GE(examples, 6);
}

}  // namespace
}  // namespace mxmoe
