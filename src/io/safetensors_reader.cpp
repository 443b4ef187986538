// The strict safetensors reader: header parsing from memory, and the mmapped file.
#include <fmt/core.h>

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "base/json.hpp"
#include "base/printable.hpp"
#include "io/mapped_file.hpp"
#include "io/safetensors.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe {

namespace {

using Json = json::Json;

// The reference implementation's limit: a larger header is refused before parsing.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
// Root object -> tensor entry -> shape / data_offsets array.
constexpr int kMaxHeaderDepth = 3;

// The whole message escaped: tensor names, keys and the label come from the file and the path.
[[noreturn]] void fail(const std::string& label, const std::string& what) {
  throw LoadError(printable(label + ": " + what));
}

std::uint64_t read_u64_le(const std::uint8_t* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative integer that fits in u64 (JSON floats and negatives are refused).
std::uint64_t as_u64(const Json& v, const std::string& label, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  fail(label, what + " must be a non-negative integer, got " + v.dump());
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

TensorInfo parse_tensor(const std::string& name, const Json& entry, const std::string& label) {
  const std::string where = "tensor \"" + name + "\"";
  if (!entry.is_object()) fail(label, where + ": entry must be a JSON object, got " + entry.dump());
  for (const auto& [key, value] : entry.items()) {
    (void)value;
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail(label, where + ": unknown field \"" + key + "\"");
  }
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) fail(label, where + ": missing field \"" + key + "\"");

  TensorInfo t;
  t.name = name;
  const Json& dtype = entry["dtype"];
  if (!dtype.is_string()) fail(label, where + ": dtype must be a string, got " + dtype.dump());
  const auto parsed = parse_st_dtype(dtype.get_ref<const std::string&>());
  if (!parsed) fail(label, where + ": unknown dtype " + dtype.dump());
  t.dtype = *parsed;

  const Json& shape = entry["shape"];
  if (!shape.is_array()) fail(label, where + ": shape must be an array, got " + shape.dump());
  for (const Json& d : shape) t.shape.push_back(as_u64(d, label, where + " shape dimension"));

  const Json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    fail(label, where + ": data_offsets must be [begin, end], got " + offsets.dump());
  t.begin = as_u64(offsets[0], label, where + " data_offsets begin");
  t.end = as_u64(offsets[1], label, where + " data_offsets end");
  if (t.end < t.begin)
    fail(label, fmt::format("{}: data_offsets end {} < begin {}", where, t.end, t.begin));

  // shape x dtype bits, overflow-checked; sub-byte dtypes must fill whole bytes.
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t elements = 1;
  for (const std::uint64_t d : t.shape) {
    if (d != 0 && elements > kMax / d)
      fail(label, where + ": element count of shape " + shape_text(t.shape) + " overflows");
    elements *= d;
  }
  const auto bits = static_cast<std::uint64_t>(dtype_bits(t.dtype));
  if (elements > kMax / bits)
    fail(label, where + ": bit size of shape " + shape_text(t.shape) + " overflows");
  const std::uint64_t total_bits = elements * bits;
  if (total_bits % 8 != 0)
    fail(label, fmt::format("{}: {} elements of {} ({} bits) are not a whole number of bytes",
                            where, elements, to_string(t.dtype), total_bits));
  if (total_bits / 8 != t.bytes())
    fail(label, fmt::format("{}: shape {} x {} needs {} bytes but data_offsets [{}, {}] hold {}",
                            where, shape_text(t.shape), to_string(t.dtype), total_bits / 8, t.begin,
                            t.end, t.bytes()));
  return t;
}

}  // namespace

SafetensorsHeader parse_safetensors(std::span<const std::uint8_t> file, const std::string& label) {
  if (file.size() < 8)
    fail(label, fmt::format("file is {} bytes, under the 8-byte header length", file.size()));
  const std::uint64_t header_len = read_u64_le(file.data());
  if (header_len > kMaxHeaderBytes)
    fail(label, fmt::format("header length {} exceeds the limit of {} bytes", header_len,
                            kMaxHeaderBytes));
  const std::uint64_t available = file.size() - 8;
  if (header_len > available)
    fail(label, fmt::format("header length {} runs past the end of the file ({} bytes after the "
                            "length field)",
                            header_len, available));
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8),
                              static_cast<std::size_t>(header_len));
  const Json root = json::parse_strict<LoadError>(text, label + " (header)", kMaxHeaderDepth);
  if (!root.is_object()) fail(label, "header must be a JSON object");

  SafetensorsHeader h;
  h.data_start = 8 + header_len;
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(label, "__metadata__ must be an object of strings");
      if (entry.contains("data_offsets")) fail(label, "a tensor may not be named \"__metadata__\"");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          fail(label,
               "__metadata__ value of \"" + key + "\" must be a string, got " + value.dump());
        h.metadata.emplace(key, value.get<std::string>());
      }
      continue;
    }
    h.tensors.push_back(parse_tensor(name, entry, label));
  }

  // Offsets must tile the data buffer from 0 without gap or overlap, up to its end.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const std::uint64_t buffer = file.size() - h.data_start;
  std::uint64_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : h.tensors) {
    if (t.begin != expected) {
      const std::string after = previous ? " after tensor \"" + previous->name + "\"" : "";
      fail(label,
           fmt::format("tensor \"{}\" starts at {} but the data{} continues at {} ({})", t.name,
                       t.begin, after, expected, t.begin > expected ? "gap" : "overlap"));
    }
    if (t.end > buffer)
      fail(label, fmt::format("tensor \"{}\" ends at {}, past the data buffer of {} bytes", t.name,
                              t.end, buffer));
    expected = t.end;
    previous = &t;
  }
  if (expected != buffer)
    fail(label, fmt::format("{} trailing bytes after the last tensor (data buffer {} bytes, "
                            "tensors end at {})",
                            buffer - expected, buffer, expected));
  return h;
}

struct SafetensorsFile::Impl {
  io::MappedFile file;
  SafetensorsHeader header;
  std::unordered_map<std::string_view, const TensorInfo*> by_name;
};

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsFile::~SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->file = io::MappedFile::open(path);
  impl->header = parse_safetensors(impl->file.bytes(), path);
  for (const TensorInfo& t : impl->header.tensors) {
    // JSON duplicates are refused by the parser; this guards the map's invariant.
    if (!impl->by_name.emplace(t.name, &t).second)
      throw LoadError(printable(path + ": duplicate tensor \"" + t.name + "\""));
  }
  return SafetensorsFile(std::move(impl));
}

const std::string& SafetensorsFile::path() const noexcept {
  return impl_->file.path();
}
const SafetensorsHeader& SafetensorsFile::header() const noexcept {
  return impl_->header;
}
std::uint64_t SafetensorsFile::file_size() const noexcept {
  return impl_->file.bytes().size();
}

bool SafetensorsFile::drop_resident(std::span<const std::uint8_t> span) const noexcept {
  return impl_->file.drop_resident(span);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const noexcept {
  const auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : it->second;
}

std::span<const std::uint8_t> SafetensorsFile::data(const TensorInfo& t) const noexcept {
  return impl_->file.bytes().subspan(static_cast<std::size_t>(impl_->header.data_start + t.begin),
                                     static_cast<std::size_t>(t.bytes()));
}

}  // namespace mxmoe
