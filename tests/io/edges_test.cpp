// The edges of the io room: only regular files read (a FIFO config.json, a FIFO .npy and
// /dev/zero are refused at once), writes whole or not at all. (The hub-cache layout and
// swiglu_alpha end to end are in checkpoint_test.cpp, transactional quantize in
// quantize_test.cpp.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/npy.hpp"
#include "io_fixtures.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing_io::Dims;
using testing_io::TempDir;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

using testing_io::temporaries_in;

// config.json as a FIFO would block a reader forever; it is refused at once, by name.
TEST(RegularFilesOnly, FifoConfigIsRefusedImmediately) {
  TempDir dir;
  testing_io::write_gpt_oss_checkpoint(dir.path(), Dims{}, /*sharded=*/false);
  fs::remove(dir / "config.json");
  ASSERT_EQ(::mkfifo((dir / "config.json").c_str(), 0600), 0);
  try {
    (void)Checkpoint::open(dir.path());
    FAIL() << "a FIFO config.json was read";
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("config.json"), HasSubstr("not a regular file (a FIFO)")));
  }
  // The same for an input .npy and a device.
  ASSERT_EQ(::mkfifo((dir / "x.npy").c_str(), 0600), 0);
  EXPECT_THROW(read_npy(dir / "x.npy"), LoadError);
  try {
    (void)read_npy("/dev/zero");
    FAIL();
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("a character device"));
  }
}

// Writes land whole or not at all: a write that cannot happen names the OS reason and leaves
// nothing behind; a successful one replaces the file and leaves no temporary.
TEST(AtomicWrites, NpyWriteIntoAnUnwritablePlaceKeepsNothingAndNamesTheReason) {
  TempDir dir;
  const std::vector<float> data = {1, 2, 3, 4};
  const std::int64_t shape[] = {2, 2};
  write_npy(dir / "y.npy", data, shape);
  const std::string before = slurp(dir / "y.npy");
  try {
    write_npy(dir / "missing_dir/y.npy", data, shape);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("cannot create"), HasSubstr("No such file")));
  }
  const std::vector<float> other = {5, 6, 7, 8};
  write_npy(dir / "y.npy", other, shape);
  EXPECT_NE(slurp(dir / "y.npy"), before);
  EXPECT_EQ(read_npy(dir / "y.npy").data, other);
  EXPECT_EQ(temporaries_in(dir.path()), 0);
}

}  // namespace
}  // namespace mxmoe
