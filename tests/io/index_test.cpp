// Sharded checkpoints: index parsing, shard-name safety, and tensor/shard consistency.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "io/tensor_set.hpp"
#include "io_fixtures.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string index_error(const std::string& text) {
  try {
    parse_safetensors_index(text, "idx.json");
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

TEST(SafetensorsIndex, ParsesWeightMapAndTotalSize) {
  const auto index = parse_safetensors_index(
      R"({"metadata":{"total_size":42},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})",
      "idx");
  EXPECT_EQ(index.total_size, 42u);
  EXPECT_EQ(index.weight_map.at("b"), "s2.safetensors");
}

TEST(SafetensorsIndex, RejectsUnsafeShardNames) {
  for (const char* name : {"/etc/passwd", "../x.safetensors", "sub/x.safetensors", "..", ".",
                           "a\\\\b.safetensors", ""}) {
    const std::string text = std::string(R"({"weight_map":{"t":")") + name + "\"}}";
    EXPECT_THAT(index_error(text), AllOf(HasSubstr("idx.json"), HasSubstr("weight_map[\"t\"]")))
        << name;
  }
}

TEST(SafetensorsIndex, RejectsMalformedIndexes) {
  EXPECT_THAT(index_error(R"({"metadata":{}})"), HasSubstr("missing \"weight_map\""));
  EXPECT_THAT(index_error(R"({"weight_map":{"t":1}})"), HasSubstr("file name string"));
  EXPECT_THAT(index_error(R"({"weight_map":{"t":"a","t":"b"}})"),
              HasSubstr("duplicate JSON key \"t\""));
  EXPECT_THAT(index_error(R"({"weight_map":[]})"), HasSubstr("must be an object"));
  EXPECT_THAT(index_error(R"({"metadata":{"total_size":-1},"weight_map":{}})"),
              HasSubstr("total_size"));
}

// Two shards holding tensors a (shard 1) and b (shard 2).
struct ShardedDir {
  testing_io::TempDir dir;
  std::vector<std::uint8_t> bytes = {1, 2, 3, 4};
  void shard(const std::string& name, const std::vector<std::string>& tensors) {
    std::vector<TensorToWrite> t;
    for (const auto& n : tensors) t.push_back({n, StDtype::U8, {4}, bytes});
    write_safetensors(dir / name, t);
  }
  void index(const std::string& weight_map) {
    testing_io::write_bytes(dir / "model.safetensors.index.json",
                            "{\"weight_map\":" + weight_map + "}");
  }
  std::string error() {
    try {
      io::TensorSet::open_dir(dir.path());
    } catch (const LoadError& e) {
      return e.what();
    }
    return "";
  }
};

TEST(ShardedCheckpoint, OpensConsistentShards) {
  ShardedDir d;
  d.shard("s1.safetensors", {"a"});
  d.shard("s2.safetensors", {"b"});
  d.index(R"({"a":"s1.safetensors","b":"s2.safetensors"})");
  const auto set = io::TensorSet::open_dir(d.dir.path());
  EXPECT_TRUE(set.sharded());
  EXPECT_EQ(set.files().size(), 2u);
  ASSERT_NE(set.find("b"), nullptr);
  EXPECT_EQ(set.find("b")->data()[3], 4);
  EXPECT_EQ(set.tensor_bytes(), 8u);
}

TEST(ShardedCheckpoint, RejectsATensorInTwoShards) {
  ShardedDir d;
  d.shard("s1.safetensors", {"a"});
  d.shard("s2.safetensors", {"a", "b"});
  d.index(R"({"a":"s1.safetensors","b":"s2.safetensors"})");
  EXPECT_THAT(d.error(),
              AllOf(HasSubstr("\"a\""), HasSubstr("s2.safetensors"), HasSubstr("s1.safetensors")));
}

TEST(ShardedCheckpoint, RejectsListedButMissingAndUnlistedTensors) {
  ShardedDir d;
  d.shard("s1.safetensors", {"a"});
  d.index(R"({"a":"s1.safetensors","ghost":"s1.safetensors"})");
  EXPECT_THAT(d.error(), AllOf(HasSubstr("\"ghost\""), HasSubstr("does not contain")));
  d.index(R"({"ghost":"s1.safetensors"})");
  EXPECT_THAT(d.error(), AllOf(HasSubstr("\"a\""), HasSubstr("not listed")));
  d.index(R"({"a":"s1.safetensors","b":"absent.safetensors"})");
  EXPECT_THAT(d.error(), AllOf(HasSubstr("absent.safetensors"), HasSubstr("does not exist")));
}

// The one file rule (io/checkpoint_file.hpp): symlinks are followed wherever they lead, as
// Hugging Face does (its cache links snapshots/<rev>/NAME to ../../blobs/<hash>); what they
// resolve to must be a regular file. A directory, a FIFO or a dangling link is refused.
TEST(ShardedCheckpoint, FollowsSymlinksToRegularFilesOnly) {
  ShardedDir d;
  testing_io::TempDir outside;
  std::vector<std::uint8_t> four = {1, 2, 3, 4};
  const std::vector<TensorToWrite> t = {{"a", StDtype::U8, {4}, four}};
  write_safetensors(outside / "blob", t);
  fs::create_symlink(outside / "blob", d.dir / "s1.safetensors");
  d.index(R"({"a":"s1.safetensors"})");
  EXPECT_EQ(d.error(), "");

  fs::remove(d.dir / "s1.safetensors");
  fs::create_directory(outside / "a_directory");
  fs::create_symlink(outside / "a_directory", d.dir / "s1.safetensors");
  EXPECT_THAT(d.error(), AllOf(HasSubstr("s1.safetensors"), HasSubstr("not a regular file")));

  fs::remove(d.dir / "s1.safetensors");
  ASSERT_EQ(::mkfifo((outside / "fifo").c_str(), 0600), 0);
  fs::create_symlink(outside / "fifo", d.dir / "s1.safetensors");
  EXPECT_THAT(d.error(), AllOf(HasSubstr("s1.safetensors"), HasSubstr("not a regular file")));

  fs::remove(d.dir / "s1.safetensors");
  fs::create_symlink(outside / "missing", d.dir / "s1.safetensors");
  EXPECT_THAT(d.error(), AllOf(HasSubstr("s1.safetensors"), HasSubstr("cannot be followed")));
}

TEST(ShardedCheckpoint, RejectsADirectoryWithoutWeights) {
  ShardedDir d;
  EXPECT_THAT(d.error(), HasSubstr("no model.safetensors"));
}

// A NUL or an escape sequence in a shard or tensor name is shown escaped: a NUL cut the
// message short (the C API's and Python's text end at it).
TEST(SafetensorsIndex, NulAndControlCharactersInNamesAreEscaped) {
  const std::string e =
      index_error(R"({"weight_map":{"t\u001b[2J":"a\u0000b/c.safetensors"}})");
  EXPECT_THAT(e, HasSubstr("weight_map[\"t\\x1b[2J\"] = \"a\\x00b/c.safetensors\""));
  EXPECT_EQ(e.find('\x1b'), std::string::npos) << e;
}

TEST(SafetensorsIndex, APathWithANulIsRefusedAndShownEscaped) {
  const std::string dir = fs::temp_directory_path().string();
  try {
    (void)Checkpoint::open(dir + std::string("\0junk", 5));
    FAIL() << "opened a path holding a NUL";
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir + "\\x00junk: a path cannot contain a NUL byte"));
  }
}

}  // namespace
}  // namespace mxmoe
