// Files as mxmoe reads and writes them (src/base/file.hpp): only regular files read, with a
// cap; writes whole or not at all, also when the write fails half way (`ulimit -f`, in a
// child process); directories replaced whole; writability checked before work.
#include "base/file.hpp"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace mxmoe::files {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

class Scratch {
 public:
  Scratch() {
    std::string tmpl = (fs::temp_directory_path() / "mxmoe_file_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Names in DIR other than the ones given (temporaries left behind).
std::vector<std::string> others(const std::string& dir, std::initializer_list<const char*> known) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (std::find(known.begin(), known.end(), name) == known.end()) out.push_back(name);
  }
  return out;
}

std::string read_error(const std::string& path, std::uint64_t cap = kMaxJsonBytes) {
  std::string error;
  EXPECT_FALSE(try_read_regular_file(path, cap, error).has_value()) << path;
  return error;
}

TEST(ReadRegularFile, ReadsAWholeFile) {
  Scratch s;
  std::ofstream(s / "a.json") << "{\"x\": 1}";
  EXPECT_EQ(read_regular_file(s / "a.json"), "{\"x\": 1}");
}

// A FIFO would block the reader until a writer appears; /dev/zero never ends; a directory
// is not a document. Each is refused at once, naming what it is.
TEST(ReadRegularFile, RefusesFifosDevicesAndDirectoriesAtOnce) {
  Scratch s;
  ASSERT_EQ(::mkfifo((s / "fifo").c_str(), 0600), 0);
  EXPECT_EQ(read_error(s / "fifo"), s / "fifo" + ": not a regular file (a FIFO)");
  EXPECT_EQ(read_error("/dev/zero"), "/dev/zero: not a regular file (a character device)");
  EXPECT_EQ(read_error(s.path()), s.path() + ": not a regular file (a directory)");
  EXPECT_THAT(read_error(s / "missing"), HasSubstr("cannot open: No such file or directory"));
  // A link to a FIFO is followed, then refused.
  fs::create_symlink(s / "fifo", s / "link");
  EXPECT_THAT(read_error(s / "link"), HasSubstr("a FIFO"));
}

TEST(ReadRegularFile, RefusesFilesOverTheCap) {
  Scratch s;
  std::ofstream(s / "big.json") << std::string(1000, ' ');
  EXPECT_EQ(read_error(s / "big.json", 999),
            s / "big.json" + ": 1000 bytes, more than the 999 this file may have");
  EXPECT_EQ(read_regular_file(s / "big.json", 1000).size(), 1000u);
}

TEST(AtomicFile, CommitReplacesTheTargetAndLeavesNoTemporary) {
  Scratch s;
  std::ofstream(s / "y.npy") << "old";
  {
    AtomicFile f(s / "y.npy");
    f.write("new ");
    EXPECT_EQ(slurp(s / "y.npy"), "old");  // nothing visible before commit
    f.write("bytes");
    f.commit();
  }
  EXPECT_EQ(slurp(s / "y.npy"), "new bytes");
  EXPECT_TRUE(others(s.path(), {"y.npy"}).empty());
}

TEST(AtomicFile, UncommittedLeavesTheTargetByteIdentical) {
  Scratch s;
  std::ofstream(s / "y.npy") << "old";
  {
    AtomicFile f(s / "y.npy");
    f.write(std::string(100000, 'x'));
  }  // an exception between write and commit ends here
  EXPECT_EQ(slurp(s / "y.npy"), "old");
  EXPECT_TRUE(others(s.path(), {"y.npy"}).empty());
}

// Issue 38: a signal during `run --output`'s write killed the process and left its partial
// temporary (gigabytes possibly), which nothing removed. The write now asks a cancel check
// between 8 MiB pieces and before the rename; cancelled, it throws WriteCancelled, the
// temporary goes and the target stays byte-identical.
TEST(AtomicFile, ACancelledWriteStopsWithinAPieceAndKeepsTheOldFile) {
  Scratch s;
  std::ofstream(s / "y.npy") << "old";
  int asked = 0;
  const std::string big(std::size_t{40} << 20, 'x');  // five pieces
  {
    AtomicFile f(s / "y.npy");
    f.set_cancel_check([&] { return ++asked > 2; });
    EXPECT_THROW(f.write(big), WriteCancelled);
    EXPECT_EQ(asked, 3);  // two pieces written, the third refused
  }
  EXPECT_EQ(slurp(s / "y.npy"), "old");
  EXPECT_TRUE(others(s.path(), {"y.npy"}).empty());
  // A signal after the last piece: the commit refuses too, nothing renamed.
  bool stop = false;
  {
    AtomicFile f(s / "y.npy");
    f.set_cancel_check([&] { return stop; });
    f.write("new");
    stop = true;
    try {
      f.commit();
      ADD_FAILURE() << "committed after the cancel check said stop";
    } catch (const WriteCancelled& e) {
      EXPECT_THAT(e.what(), HasSubstr("y.npy: the write was interrupted"));
    }
  }
  EXPECT_EQ(slurp(s / "y.npy"), "old");
  EXPECT_TRUE(others(s.path(), {"y.npy"}).empty());
}

// A writer killed outright (SIGKILL, power loss) leaves its temporary file: the next write of
// the same target removes it (a dead PID's, of the exact form only; a user's look-alike file
// and a live process's temporary stay).
TEST(AtomicFile, PartialTemporariesOfADeadProcessAreRemovedByTheNextWrite) {
  Scratch s;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    AtomicFile f(s / "y.npy");
    f.write(std::string(1 << 20, 'x'));
    ::raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_EQ(others(s.path(), {}).size(), 1u);  // the dead process's partial temporary
  std::ofstream(s / ".y.npy.mxmoe-tmp-mine") << "keep";
  const std::string live = ".y.npy.mxmoe-tmp-" + std::to_string(::getppid()) + "-7";
  std::ofstream(s / live) << "keep";
  {
    AtomicFile f(s / "y.npy");
    f.write("new");
    f.commit();
  }
  EXPECT_EQ(slurp(s / "y.npy"), "new");
  std::vector<std::string> left = others(s.path(), {"y.npy"});
  std::vector<std::string> kept = {".y.npy.mxmoe-tmp-mine", live};
  std::sort(left.begin(), left.end());
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(left, kept);
}

// The file size limit of `ulimit -f` hits half way through a write: the old file stays
// byte-identical and the temporary is removed. In a child, so the limit does not bind the
// test runner; SIGXFSZ ignored as the CLI does, so the write fails with EFBIG.
TEST(AtomicFile, WriteFailingHalfWayUnderAFileSizeLimitKeepsTheOldFile) {
  Scratch s;
  const std::string old(5000, 'o');
  std::ofstream(s / "y.npy") << old;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{16384, 16384};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      AtomicFile f(s / "y.npy");
      f.write(std::string(100000, 'n'));
      f.commit();
    } catch (const FileError& e) {
      const std::string what = e.what();
      ::_exit(what.find("File too large") != std::string::npos ? 42 : 1);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 42);  // the write failed with EFBIG, reported
  EXPECT_EQ(slurp(s / "y.npy"), old);
  EXPECT_TRUE(others(s.path(), {"y.npy"}).empty());
}

// A symlinked target: the file it points to is replaced, the link stays a link.
TEST(AtomicFile, SymlinkTargetIsReplacedAndTheLinkKept) {
  Scratch s;
  std::ofstream(s / "real.npy") << "old";
  fs::create_symlink(s / "real.npy", s / "link.npy");
  write_file_atomically(s / "link.npy", "new");
  EXPECT_TRUE(fs::is_symlink(s / "link.npy"));
  EXPECT_EQ(slurp(s / "real.npy"), "new");
}

// Special files (/dev/null, a FIFO with a reader) are written straight into.
TEST(AtomicFile, SpecialFilesAreWrittenDirectly) {
  EXPECT_NO_THROW(write_file_atomically("/dev/null", "discarded"));
}

TEST(CheckCanCreate, NamesTheOsReasonBeforeAnyWork) {
  Scratch s;
  try {
    check_can_create(s / "missing_dir/y.npy");
    FAIL();
  } catch (const FileError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot create " + s / "missing_dir/y.npy" + ": No such file or directory");
  }
  try {
    check_can_create(s.path());
    FAIL();
  } catch (const FileError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Is a directory"));
  }
  // A read-only place (as root, permission bits do not bind: /sys is read-only).
  if (::access("/sys", W_OK) != 0) {
    try {
      check_can_create("/sys/y.npy");
      FAIL();
    } catch (const FileError& e) {
      EXPECT_THAT(e.what(), HasSubstr("cannot create /sys/y.npy: "));
    }
  }
  check_can_create(s / "fine.npy");
  EXPECT_FALSE(fs::exists(s / "fine.npy"));  // the check leaves nothing behind
  EXPECT_TRUE(others(s.path(), {}).empty());
}

TEST(AtomicDirectory, CommitCreatesOrReplacesTheWholeDirectory) {
  Scratch s;
  const std::string out = s / "out";
  {
    AtomicDirectory d(out);
    std::ofstream(d.path() + "/a") << "1";
    EXPECT_FALSE(fs::exists(out));
    d.commit(/*replace_existing=*/false);
  }
  EXPECT_EQ(slurp(out + "/a"), "1");
  std::ofstream(out + "/stale") << "old";
  {
    AtomicDirectory d(out);
    std::ofstream(d.path() + "/b") << "2";
    EXPECT_THROW(d.commit(/*replace_existing=*/false), FileError);
  }
  EXPECT_TRUE(fs::exists(out + "/stale"));  // refused: untouched
  {
    AtomicDirectory d(out);
    std::ofstream(d.path() + "/b") << "2";
    d.commit(/*replace_existing=*/true);
  }
  EXPECT_FALSE(fs::exists(out + "/a"));
  EXPECT_FALSE(fs::exists(out + "/stale"));
  EXPECT_EQ(slurp(out + "/b"), "2");
  EXPECT_TRUE(others(s.path(), {"out"}).empty());
}

// A process killed mid-way (SIGKILL) leaves its temporary directory; the next one removes it.
TEST(AtomicDirectory, LeftoversOfADeadProcessAreRemoved) {
  Scratch s;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    AtomicDirectory d(s / "out");
    std::ofstream(d.path() + "/half") << "x";
    ::raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_EQ(others(s.path(), {}).size(), 1u);  // the dead process's temporary
  {
    AtomicDirectory d(s / "out");
    d.commit(false);
  }
  EXPECT_TRUE(others(s.path(), {"out"}).empty());
}

// Only names of the temporaries' exact form (".NAME.mxmoe-tmp-PID-N", digits) with a dead PID
// are leftovers: a user's folder that merely starts alike is never removed (it was: a suffix
// that is no number read as PID 0, "not running"), nor a link to a folder.
TEST(AtomicDirectory, AUsersLookAlikeFolderIsNeverRemoved) {
  Scratch s;
  const std::string look_alike = s.path() + "/.out.mxmoe-tmp-mybackup";
  fs::create_directories(look_alike);
  std::ofstream(look_alike + "/data") << "keep";
  fs::create_directories(s.path() + "/real");
  std::ofstream(s.path() + "/real/data") << "keep";
  fs::create_directory_symlink(s.path() + "/real", s.path() + "/.out.mxmoe-tmp-1-2");
  fs::create_directories(s.path() + "/.out.mxmoe-tmp-12x-3");
  {
    AtomicDirectory d(s / "out");
    d.commit(false);
  }
  EXPECT_TRUE(fs::exists(look_alike + "/data"));
  EXPECT_TRUE(fs::exists(s.path() + "/real/data"));
  EXPECT_TRUE(fs::is_symlink(s.path() + "/.out.mxmoe-tmp-1-2"));
  EXPECT_TRUE(fs::exists(s.path() + "/.out.mxmoe-tmp-12x-3"));
}

}  // namespace
}  // namespace mxmoe::files
