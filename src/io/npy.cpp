// .npy files (NumPy format 1.0/2.0/3.0): a strict reader and a float32 writer.
#include "io/npy.hpp"

#include <fmt/core.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>

#include "base/file.hpp"
#include "io/mapped_file.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;

float half_to_float(std::uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  if (exp == 0) return static_cast<float>(sign) * std::ldexp(static_cast<float>(mant), -24);
  if (exp == 31)
    return mant ? std::numeric_limits<float>::quiet_NaN()
                : static_cast<float>(sign) * std::numeric_limits<float>::infinity();
  return static_cast<float>(sign) * std::ldexp(static_cast<float>(mant + 1024), exp - 25);
}

// A value of the header dictionary and what it was written as: '<f4' is a string, False a
// word, (2, 3) a tuple; each key takes one kind only ('shape': '(4, 256)' is refused).
struct HeaderValue {
  enum class Kind { string, tuple, word } kind = Kind::word;
  std::string text;  // without the quotes of a string
};

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& path) : s_(text), path_(path) {}

  std::map<std::string, HeaderValue> parse() {
    std::map<std::string, HeaderValue> fields;
    skip_space();
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') {
        ++pos_;
        break;
      }
      const std::string key = quoted();
      skip_space();
      expect(':');
      skip_space();
      HeaderValue value;
      if (peek() == '\'' || peek() == '"') {
        value = {HeaderValue::Kind::string, quoted()};
      } else if (peek() == '(') {
        const std::size_t end = s_.find(')', pos_);
        if (end == std::string_view::npos) fail("unterminated shape tuple");
        value = {HeaderValue::Kind::tuple, std::string(s_.substr(pos_, end + 1 - pos_))};
        pos_ = end + 1;
      } else {
        const std::size_t start = pos_;
        while (pos_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[pos_]))) ++pos_;
        value = {HeaderValue::Kind::word, std::string(s_.substr(start, pos_ - start))};
      }
      if (!fields.emplace(key, value).second) fail("duplicate key '" + key + "'");
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip_space();
      expect('}');
      break;
    }
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the header dictionary");
    return fields;
  }

 private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t')) ++pos_;
  }
  void expect(char c) {
    if (peek() != c) fail(fmt::format("expected '{}' at header offset {}", c, pos_));
    ++pos_;
  }
  std::string quoted() {
    const char q = peek();
    if (q != '\'' && q != '"') fail(fmt::format("expected a quoted key at header offset {}", pos_));
    const std::size_t end = s_.find(q, pos_ + 1);
    if (end == std::string_view::npos) fail("unterminated string in the header");
    std::string out(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return out;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw LoadError(path_ + ": malformed .npy header: " + what);
  }

  std::string_view s_;
  const std::string& path_;
  std::size_t pos_ = 0;
};

std::vector<std::int64_t> parse_shape(const std::string& tuple, const std::string& path) {
  // "(2, 3)", "(5,)", "()"
  std::vector<std::int64_t> shape;
  std::size_t i = 1;
  while (i + 1 < tuple.size()) {
    while (i < tuple.size() && (tuple[i] == ' ' || tuple[i] == ',')) ++i;
    if (i + 1 >= tuple.size()) break;
    std::int64_t v = 0;
    const std::size_t start = i;
    while (i < tuple.size() && tuple[i] >= '0' && tuple[i] <= '9') {
      if (v > (std::numeric_limits<std::int64_t>::max() - 9) / 10)
        throw LoadError(path + ": .npy shape dimension too large in " + tuple);
      v = v * 10 + (tuple[i] - '0');
      ++i;
    }
    if (i == start) throw LoadError(path + ": .npy shape is not a tuple of integers: " + tuple);
    shape.push_back(v);
  }
  return shape;
}

// A .npy file image with its header checked: the dtype (one of `item_sizes`' keys), the
// shape, and the data bytes, exactly count x item size of them (pointing into the image).
struct RawNpy {
  std::string descr;
  std::vector<std::int64_t> shape;
  const std::uint8_t* data = nullptr;
  std::size_t count = 0;
};

RawNpy parse_raw_npy(std::span<const std::uint8_t> bytes, const std::string& path,
                     const std::map<std::string, std::size_t>& item_sizes,
                     const std::string& expected) {
  if (bytes.size() < kMagicLen + 4 || std::memcmp(bytes.data(), kMagic, kMagicLen) != 0)
    throw LoadError(path + ": not a .npy file (bad magic)");
  const int major = bytes[6];
  std::size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<std::size_t>(bytes[8] | (bytes[9] << 8));
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw LoadError(path + ": truncated .npy header");
    header_len = static_cast<std::size_t>(bytes[8]) | (static_cast<std::size_t>(bytes[9]) << 8) |
                 (static_cast<std::size_t>(bytes[10]) << 16) |
                 (static_cast<std::size_t>(bytes[11]) << 24);
    header_start = 12;
  } else {
    throw LoadError(fmt::format("{}: unsupported .npy version {}.{}", path, major, bytes[7]));
  }
  if (header_len > bytes.size() - header_start)
    throw LoadError(fmt::format("{}: truncated .npy: header of {} bytes, file has {}", path,
                                header_len, bytes.size()));
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + header_start),
                              header_len);
  const std::map<std::string, HeaderValue> values = HeaderParser(text, path).parse();
  using Kind = HeaderValue::Kind;
  const std::map<std::string, std::pair<Kind, const char*>> kinds = {
      {"descr", {Kind::string, "a quoted dtype string ('<f4')"}},
      {"fortran_order", {Kind::word, "True or False, unquoted"}},
      {"shape", {Kind::tuple, "a tuple of integers ((4, 256))"}}};
  for (const auto& [key, value] : values) {
    const auto kind = kinds.find(key);
    if (kind == kinds.end()) throw LoadError(path + ": .npy header has unknown key '" + key + "'");
    if (value.kind != kind->second.first)
      throw LoadError(
          path + ": .npy header: '" + key + "' must be " + kind->second.second + ", got " +
          (value.kind == Kind::string ? "the string '" + value.text + "'" : value.text));
  }
  std::map<std::string, std::string> fields;
  for (const auto& [key, value] : values) fields[key] = value.text;
  for (const char* key : {"descr", "fortran_order", "shape"})
    if (!fields.count(key)) throw LoadError(path + ": .npy header lacks '" + key + "'");
  if (fields["fortran_order"] != "False")
    throw LoadError(path + ": fortran_order=" + fields["fortran_order"] +
                    " is not supported (write a C-order array)");
  RawNpy raw;
  raw.descr = fields["descr"];
  const auto it = item_sizes.find(raw.descr);
  if (it == item_sizes.end())
    throw LoadError(path + ": dtype '" + raw.descr + "' is not supported (expected " + expected +
                    ")");
  const std::size_t item = it->second;
  raw.shape = parse_shape(fields["shape"], path);
  if (raw.shape.size() > kMaxNpyRank)
    throw LoadError(fmt::format("{}: .npy shape {} has {} dimensions, more than {}", path,
                                fields["shape"], raw.shape.size(), kMaxNpyRank));
  std::uint64_t count = 1;
  for (const std::int64_t d : raw.shape) {
    const auto ud = static_cast<std::uint64_t>(d);
    if (ud != 0 && count > std::numeric_limits<std::uint64_t>::max() / 8 / ud)
      throw LoadError(path + ": .npy shape " + fields["shape"] + " overflows");
    count *= ud;
  }
  const std::uint64_t need = count * item;
  const std::uint64_t have = bytes.size() - header_start - header_len;
  if (have < need)
    throw LoadError(fmt::format("{}: truncated .npy: shape {} needs {} data bytes, file has {}",
                                path, fields["shape"], need, have));
  if (have > need)
    throw LoadError(fmt::format("{}: .npy has {} bytes after the {} data bytes of shape {}", path,
                                have - need, need, fields["shape"]));
  raw.data = bytes.data() + header_start + header_len;
  raw.count = static_cast<std::size_t>(count);
  return raw;
}

}  // namespace

NpyArray read_npy(const std::string& path, bool allow_bf16_as_u16) {
  const io::MappedFile file = io::MappedFile::open(path);
  return parse_npy(file.bytes(), path, allow_bf16_as_u16);
}

NpyArray parse_npy(std::span<const std::uint8_t> bytes, const std::string& path,
                   bool allow_bf16_as_u16) {
  std::map<std::string, std::size_t> items = {{"<f4", 4}, {"<f2", 2}};
  if (allow_bf16_as_u16) items["<u2"] = 2;
  const RawNpy raw =
      parse_raw_npy(bytes, path, items,
                    allow_bf16_as_u16 ? "'<f4' or '<f2', or bfloat16 as '<u2'" : "'<f4' or '<f2'");
  NpyArray out;
  out.shape = raw.shape;
  out.data.resize(raw.count);
  for (std::size_t i = 0; i < out.data.size(); ++i) {
    if (raw.descr == "<f4") {
      std::memcpy(&out.data[i], raw.data + 4 * i, 4);
    } else {
      const auto h = static_cast<std::uint16_t>(raw.data[2 * i] | (raw.data[2 * i + 1] << 8));
      out.data[i] = raw.descr == "<f2" ? half_to_float(h) : bf16_to_f32(h);
    }
  }
  return out;
}

NpyInts read_npy_ints(const std::string& path) {
  const io::MappedFile file = io::MappedFile::open(path);
  const RawNpy raw = parse_raw_npy(file.bytes(), path, {{"<i4", 4}, {"<i8", 8}}, "'<i4' or '<i8'");
  NpyInts out;
  out.shape = raw.shape;
  out.data.resize(raw.count);
  for (std::size_t i = 0; i < out.data.size(); ++i) {
    if (raw.descr == "<i4") {
      std::int32_t v;
      std::memcpy(&v, raw.data + 4 * i, 4);
      out.data[i] = v;
    } else {
      std::memcpy(&out.data[i], raw.data + 8 * i, 8);
    }
  }
  return out;
}

void write_npy(const std::string& path, std::span<const float> data,
               std::span<const std::int64_t> shape) {
  write_npy(path, data, shape, {});
}

void write_npy(const std::string& path, std::span<const float> data,
               std::span<const std::int64_t> shape, const std::function<bool()>& cancelled) {
  std::int64_t count = 1;
  std::string dims;
  for (const std::int64_t d : shape) {
    if (d < 0) throw std::invalid_argument(fmt::format("write_npy {}: negative dimension", path));
    count *= d;
    dims += std::to_string(d) + ", ";
  }
  if (shape.size() > 1) dims.erase(dims.size() - 1);
  if (static_cast<std::size_t>(count) != data.size())
    throw std::invalid_argument(
        fmt::format("write_npy {}: shape has {} elements, data has {}", path, count, data.size()));
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const std::size_t total = 10 + header.size() + 1;  // magic(6) version(2) len(2) ... '\n'
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  files::AtomicFile out(path);
  out.set_cancel_check(cancelled);
  out.write(kMagic, kMagicLen);
  const char version[2] = {1, 0};
  out.write(version, 2);
  const char len[2] = {static_cast<char>(header.size() & 0xFF),
                       static_cast<char>(header.size() >> 8)};
  out.write(len, 2);
  out.write(header);
  static_assert(std::endian::native == std::endian::little, "npy writer assumes little-endian");
  out.write(data.data(), data.size() * sizeof(float));
  out.commit();
}

}  // namespace mxmoe
