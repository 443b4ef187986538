// .npy read/write: round trip, float16 and bfloat16 inputs, and every malformed file.
#include "io/npy.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "io_fixtures.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe {
namespace {

using ::testing::HasSubstr;
using testing_io::TempDir;

std::string npy_image(const std::string& dict, const std::string& data, char major = 1) {
  std::string header = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = std::string("\x93NUMPY", 6) + major + '\0';
  const std::size_t n = header.size();
  out += static_cast<char>(n & 0xFF);
  out += static_cast<char>(n >> 8);
  if (major != 1) out += std::string(2, '\0');
  return out + header + data;
}

std::string read_error(const std::string& image, bool bf16 = false) {
  TempDir dir;
  testing_io::write_bytes(dir / "a.npy", image);
  try {
    read_npy(dir / "a.npy", bf16);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Npy, RoundTripsFloat32) {
  TempDir dir;
  std::mt19937 rng(5);
  std::normal_distribution<float> d;
  std::vector<float> data(3 * 70);
  for (auto& v : data) v = d(rng);
  const std::vector<std::int64_t> shape = {3, 70};
  write_npy(dir / "x.npy", data, shape);
  const NpyArray a = read_npy(dir / "x.npy");
  EXPECT_EQ(a.shape, shape);
  EXPECT_EQ(a.data, data);
  const std::vector<std::int64_t> vec = {5};
  write_npy(dir / "v.npy", std::span(data).first(5), vec);
  EXPECT_EQ(read_npy(dir / "v.npy").shape, vec);
  EXPECT_THROW(write_npy(dir / "bad.npy", data, vec), std::invalid_argument);
}

TEST(Npy, ReadsFloat16AndBfloat16AndVersion2) {
  // float16 1.5 = 0x3E00, -2 = 0xC000; bfloat16 1.5 = 0x3FC0.
  const std::string f16 = npy_image("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }",
                                    std::string("\x00\x3e\x00\xc0", 4));
  TempDir dir;
  testing_io::write_bytes(dir / "h.npy", f16);
  EXPECT_EQ(read_npy(dir / "h.npy").data, (std::vector<float>{1.5f, -2.0f}));
  const std::string bf = npy_image("{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }",
                                   std::string("\xc0\x3f", 2), 2);
  testing_io::write_bytes(dir / "b.npy", bf);
  EXPECT_EQ(read_npy(dir / "b.npy", true).data, (std::vector<float>{1.5f}));
  EXPECT_THAT(read_error(bf, false), HasSubstr("'<u2' is not supported"));
}

TEST(Npy, RejectsMalformedFiles) {
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  const std::string data(16, '\x01');
  EXPECT_EQ(read_error(npy_image(ok_dict, data)), "");
  EXPECT_THAT(read_error("not numpy at all"), HasSubstr("bad magic"));
  EXPECT_THAT(read_error(npy_image(ok_dict, data, 9)), HasSubstr("version 9"));
  EXPECT_THAT(read_error(npy_image(ok_dict, data.substr(0, 10))), HasSubstr("truncated"));
  EXPECT_THAT(read_error(npy_image(ok_dict, data + "xx")), HasSubstr("2 bytes after"));
  EXPECT_THAT(read_error(npy_image(ok_dict, "").substr(0, 40)), HasSubstr("truncated"));
  EXPECT_THAT(
      read_error(npy_image("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", data)),
      HasSubstr("fortran_order"));
  EXPECT_THAT(
      read_error(npy_image("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", data)),
      HasSubstr("'>f4'"));
  EXPECT_THAT(read_error(npy_image("{'descr': '<f4', 'shape': (2, 2), }", data)),
              HasSubstr("fortran_order"));
  EXPECT_THAT(
      read_error(npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (a,), }", data)),
      HasSubstr("shape"));
  EXPECT_THAT(read_error(npy_image("{'descr': '<f4' 'fortran_order': False}", data)),
              HasSubstr("malformed"));
  EXPECT_THAT(read_error(npy_image(
                  "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, "
                  "99999999999), }",
                  data)),
              HasSubstr("overflows"));
}

// Each header key takes one kind of value: a string where a tuple or a word belongs (or the
// reverse) is refused, naming the key, never read for what its text looks like.
TEST(Npy, RejectsHeaderValuesOfTheWrongKind) {
  const std::string data(16, '\x01');
  EXPECT_THAT(read_error(npy_image(
                  "{'descr': '<f4', 'fortran_order': False, 'shape': '(2, 2)', }", data)),
              HasSubstr("'shape' must be a tuple of integers ((4, 256)), got the string '(2, 2)'"));
  EXPECT_THAT(read_error(npy_image(
                  "{'descr': '<f4', 'fortran_order': 'False', 'shape': (2, 2), }", data)),
              HasSubstr("'fortran_order' must be True or False, unquoted"));
  EXPECT_THAT(
      read_error(npy_image("{'descr': f, 'fortran_order': False, 'shape': (2, 2), }", data)),
      HasSubstr("'descr' must be a quoted dtype string"));
}

}  // namespace
}  // namespace mxmoe
