// The strict safetensors reader: one test per rejection class, each checking that the
// message names the file, the tensor and the offending numbers; and writer -> reader.
#include "io/safetensors.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "io_fixtures.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing_io::raw_safetensors;

std::span<const std::uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// Parses IMAGE and returns the LoadError text ("" if it parsed).
std::string error_of(const std::string& image) {
  try {
    parse_safetensors(as_bytes(image), "f.safetensors");
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

std::string tensor(const std::string& name, const std::string& dtype, const std::string& shape,
                   std::uint64_t begin, std::uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

TEST(Safetensors, AcceptsAValidFileWithEmptyAndScalarTensors) {
  const std::string header =
      "{" + tensor("a", "F32", "[2,2]", 0, 16) + "," + tensor("empty", "BF16", "[0,7]", 16, 16) +
      "," + tensor("scalar", "I16", "[]", 16, 18) + "," + tensor("f4", "F4", "[3,2]", 18, 21) +
      ",\"__metadata__\":{\"format\":\"pt\"}}   ";
  const auto h = parse_safetensors(as_bytes(raw_safetensors(header, std::string(21, 'x'))), "f");
  ASSERT_EQ(h.tensors.size(), 4u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[1].name, "empty");
  EXPECT_EQ(h.tensors[2].name, "scalar");
  EXPECT_TRUE(h.tensors[2].shape.empty());
}

TEST(Safetensors, RejectsFilesUnderEightBytes) {
  EXPECT_THAT(error_of("abc"), AllOf(HasSubstr("f.safetensors"), HasSubstr("3 bytes")));
  EXPECT_THAT(error_of(""), HasSubstr("0 bytes"));
}

TEST(Safetensors, RejectsHugeHeaderLength) {
  std::string image(16, '\0');
  image[4] = 1;  // 2^32
  EXPECT_THAT(error_of(image), AllOf(HasSubstr("4294967296"), HasSubstr("100000000")));
}

TEST(Safetensors, RejectsHeaderPastTheEnd) {
  std::string image = raw_safetensors("{}", "");
  image[0] = 50;
  EXPECT_THAT(error_of(image), AllOf(HasSubstr("header length 50"), HasSubstr("2 bytes")));
}

TEST(Safetensors, RejectsInvalidJsonAndUtf8) {
  EXPECT_THAT(error_of(raw_safetensors("{\"a\":", "")), HasSubstr("invalid JSON"));
  EXPECT_THAT(error_of(raw_safetensors("{\"\xff\xfe\":{}}", "")), HasSubstr("invalid JSON"));
  EXPECT_THAT(error_of(raw_safetensors("{\"__metadata__\":{\"k\":\"\xc3\x28\"}}", "")),
              HasSubstr("UTF-8"));
  EXPECT_THAT(error_of(raw_safetensors("[1,2]", "")), HasSubstr("JSON object"));
}

TEST(Safetensors, RejectsNonStringMetadata) {
  EXPECT_THAT(error_of(raw_safetensors("{\"__metadata__\":{\"n\":3}}", "")),
              AllOf(HasSubstr("\"n\""), HasSubstr("must be a string")));
  EXPECT_THAT(error_of(raw_safetensors("{\"__metadata__\":[]}", "")), HasSubstr("__metadata__"));
}

TEST(Safetensors, RejectsATensorNamedMetadata) {
  const std::string header = "{" + tensor("__metadata__", "U8", "[1]", 0, 1) + "}";
  EXPECT_THAT(error_of(raw_safetensors(header, "x")), HasSubstr("__metadata__"));
}

TEST(Safetensors, RejectsDuplicateNames) {
  const std::string header =
      "{" + tensor("w", "U8", "[1]", 0, 1) + "," + tensor("w", "U8", "[1]", 1, 2) + "}";
  EXPECT_THAT(error_of(raw_safetensors(header, "xy")),
              AllOf(HasSubstr("duplicate"), HasSubstr("\"w\"")));
}

TEST(Safetensors, RejectsUnknownDtypeAndBadFields) {
  EXPECT_THAT(error_of(raw_safetensors("{" + tensor("w", "Q4_K", "[1]", 0, 1) + "}", "x")),
              AllOf(HasSubstr("\"w\""), HasSubstr("unknown dtype \"Q4_K\"")));
  EXPECT_THAT(error_of(raw_safetensors("{" + tensor("w", "U8", "[-1]", 0, 1) + "}", "x")),
              HasSubstr("non-negative integer"));
  EXPECT_THAT(error_of(raw_safetensors("{" + tensor("w", "U8", "[1.5]", 0, 1) + "}", "x")),
              HasSubstr("non-negative integer"));
  EXPECT_THAT(error_of(raw_safetensors("{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", "x")),
              AllOf(HasSubstr("\"w\""), HasSubstr("data_offsets")));
  EXPECT_THAT(error_of(raw_safetensors(
                  "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", "x")),
              HasSubstr("unknown field \"x\""));
}

TEST(Safetensors, RejectsGapsOverlapsAndReversedOffsets) {
  const std::string gap =
      "{" + tensor("a", "U8", "[1]", 0, 1) + "," + tensor("b", "U8", "[1]", 2, 3) + "}";
  EXPECT_THAT(error_of(raw_safetensors(gap, "xyz")),
              AllOf(HasSubstr("\"b\" starts at 2"), HasSubstr("continues at 1"), HasSubstr("gap")));
  const std::string first_gap = "{" + tensor("a", "U8", "[1]", 1, 2) + "}";
  EXPECT_THAT(error_of(raw_safetensors(first_gap, "xy")), HasSubstr("starts at 1"));
  const std::string overlap =
      "{" + tensor("a", "U8", "[2]", 0, 2) + "," + tensor("b", "U8", "[2]", 1, 3) + "}";
  EXPECT_THAT(error_of(raw_safetensors(overlap, "xyz")), HasSubstr("overlap"));
  const std::string reversed = "{" + tensor("a", "U8", "[0]", 2, 1) + "}";
  EXPECT_THAT(error_of(raw_safetensors(reversed, "xy")),
              AllOf(HasSubstr("\"a\""), HasSubstr("end 1 < begin 2")));
}

TEST(Safetensors, RejectsSizeMismatchAndOverflow) {
  EXPECT_THAT(error_of(raw_safetensors("{" + tensor("w", "F32", "[2,3]", 0, 20) + "}",
                                       std::string(20, 'x'))),
              AllOf(HasSubstr("\"w\""), HasSubstr("needs 24 bytes"), HasSubstr("hold 20")));
  EXPECT_THAT(
      error_of(raw_safetensors("{" + tensor("w", "U8", "[4294967296,4294967297]", 0, 0) + "}", "")),
      HasSubstr("overflows"));
  EXPECT_THAT(error_of(raw_safetensors(
                  "{" + tensor("w", "F64", "[2305843009213693952,1]", 0, 0) + "}", "")),
              HasSubstr("overflows"));
  // F4: 3 elements are 12 bits, not whole bytes; F6 x 5 = 30 bits likewise.
  EXPECT_THAT(error_of(raw_safetensors("{" + tensor("w", "F4", "[3]", 0, 2) + "}", "xy")),
              HasSubstr("not a whole number of bytes"));
  EXPECT_THAT(error_of(raw_safetensors("{" + tensor("w", "F6_E2M3", "[5]", 0, 4) + "}", "wxyz")),
              HasSubstr("30 bits"));
  EXPECT_EQ(error_of(raw_safetensors("{" + tensor("w", "F6_E3M2", "[4]", 0, 3) + "}", "xyz")), "");
}

TEST(Safetensors, RejectsTrailingBytesAndDataPastTheEnd) {
  EXPECT_THAT(error_of(raw_safetensors("{" + tensor("w", "U8", "[2]", 0, 2) + "}", "xyz")),
              AllOf(HasSubstr("1 trailing bytes"), HasSubstr("tensors end at 2")));
  EXPECT_THAT(error_of(raw_safetensors("{" + tensor("w", "U8", "[4]", 0, 4) + "}", "xy")),
              AllOf(HasSubstr("\"w\" ends at 4"), HasSubstr("2 bytes")));
}

TEST(Safetensors, RejectsDeepNesting) {
  const std::string deep = "{\"__metadata__\":{\"a\":[[[[[1]]]]]}}";
  EXPECT_THAT(error_of(raw_safetensors(deep, "")), HasSubstr("nested deeper"));
}

TEST(Safetensors, WriterRoundTripsThroughTheMappedReader) {
  testing_io::TempDir dir;
  std::mt19937 rng(3);
  std::vector<std::vector<std::uint8_t>> payloads;
  std::vector<TensorToWrite> tensors;
  const std::vector<std::pair<StDtype, std::vector<std::uint64_t>>> kinds = {
      {StDtype::F32, {3, 5}}, {StDtype::BF16, {7}}, {StDtype::U8, {2, 3, 4}},
      {StDtype::F4, {6, 2}},  {StDtype::I64, {}},   {StDtype::F16, {0, 3}}};
  payloads.reserve(kinds.size());
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    std::uint64_t bits = static_cast<std::uint64_t>(dtype_bits(kinds[i].first));
    for (auto d : kinds[i].second) bits *= d;
    payloads.emplace_back(bits / 8);
    for (auto& b : payloads.back()) b = static_cast<std::uint8_t>(rng());
    tensors.push_back({"t" + std::to_string(i), kinds[i].first, kinds[i].second, payloads.back()});
  }
  const std::string path = dir / "x.safetensors";
  write_safetensors(path, tensors, {{"format", "pt"}});
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.header().data_start % 8, 0u);
  EXPECT_EQ(file.header().metadata.at("format"), "pt");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo* info = file.find(tensors[i].name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, tensors[i].dtype);
    EXPECT_EQ(info->shape, tensors[i].shape);
    const auto data = file.data(*info);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), payloads[i].begin(), payloads[i].end()));
  }
  EXPECT_EQ(file.find("missing"), nullptr);
}

TEST(Safetensors, WriterRefusesDuplicateAndMisSizedTensors) {
  testing_io::TempDir dir;
  const std::vector<std::uint8_t> four(4);
  const std::vector<TensorToWrite> dup = {{"a", StDtype::U8, {4}, four},
                                          {"a", StDtype::U8, {4}, four}};
  EXPECT_THROW(write_safetensors(dir / "d.safetensors", dup), std::invalid_argument);
  const std::vector<TensorToWrite> bad = {{"a", StDtype::F32, {2}, four}};
  EXPECT_THROW(write_safetensors(dir / "b.safetensors", bad), std::invalid_argument);
}

TEST(Safetensors, OpenNamesTheFile) {
  testing_io::TempDir dir;
  testing_io::write_bytes(dir / "bad.safetensors", "short");
  try {
    SafetensorsFile::open(dir / "bad.safetensors");
    FAIL() << "expected LoadError";
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("bad.safetensors"));
  }
  EXPECT_THROW(SafetensorsFile::open(dir / "absent.safetensors"), LoadError);
}

}  // namespace
}  // namespace mxmoe
