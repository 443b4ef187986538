// The safetensors writer: streamed (io/safetensors_stream.hpp) and, on top of it, the
// in-memory form of io/safetensors.hpp (tests build fixtures with it).
#include <fmt/core.h>

#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "io/safetensors.hpp"
#include "io/safetensors_stream.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe::io {

std::uint64_t tensor_byte_size(const TensorHeader& t) {
  std::uint64_t bits = static_cast<std::uint64_t>(dtype_bits(t.dtype));
  for (const std::uint64_t d : t.shape) {
    if (d != 0 && bits > UINT64_MAX / d)
      throw std::invalid_argument(
          fmt::format("safetensors: tensor \"{}\" is too large (its size overflows)", t.name));
    bits *= d;
  }
  if (bits % 8 != 0)
    throw std::invalid_argument(fmt::format(
        "safetensors: tensor \"{}\" is not a whole number of bytes ({} bits)", t.name, bits));
  return bits / 8;
}

namespace {

// The header text, padded with spaces to a multiple of 8 bytes (keeps the data buffer 8-byte
// aligned), and the data buffer's size.
std::string header_text(std::span<const TensorHeader> tensors,
                        const std::map<std::string, std::string>& metadata,
                        std::uint64_t& data_bytes) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> names;
  std::uint64_t offset = 0;
  for (const TensorHeader& t : tensors) {
    if (t.name == "__metadata__" || t.name.empty())
      throw std::invalid_argument("write_safetensors: reserved tensor name \"" + t.name + "\"");
    if (!names.insert(t.name).second)
      throw std::invalid_argument("write_safetensors: duplicate tensor \"" + t.name + "\"");
    const std::uint64_t bytes = tensor_byte_size(t);
    header[t.name] = {{"dtype", std::string(to_string(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  data_bytes = offset;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

SafetensorsStreamWriter::SafetensorsStreamWriter(const std::string& path,
                                                 std::span<const TensorHeader> tensors,
                                                 const std::map<std::string, std::string>& metadata)
    : header_(header_text(tensors, metadata, total_)), file_(path) {
  std::uint64_t len = header_.size();
  char len_bytes[8];
  for (char& b : len_bytes) {
    b = static_cast<char>(len & 0xFF);
    len >>= 8;
  }
  file_.write(len_bytes, 8);
  file_.write(header_);
  header_ = std::string();
}

void SafetensorsStreamWriter::write(std::span<const std::uint8_t> bytes) {
  if (bytes.size() > total_ - written_)
    throw std::invalid_argument(fmt::format("{}: {} bytes past the {} bytes of its tensors",
                                            file_.path(), written_ + bytes.size() - total_,
                                            total_));
  file_.write(bytes.data(), bytes.size());
  written_ += bytes.size();
}

void SafetensorsStreamWriter::commit() {
  if (written_ != total_)
    throw std::invalid_argument(fmt::format("{}: {} of its tensors' {} bytes were written",
                                            file_.path(), written_, total_));
  file_.commit();
}

}  // namespace mxmoe::io

namespace mxmoe {

void write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<io::TensorHeader> headers;
  headers.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) {
    headers.push_back({t.name, t.dtype, t.shape});
    const std::uint64_t bytes = io::tensor_byte_size(headers.back());
    if (bytes != t.data.size())
      throw std::invalid_argument(
          fmt::format("write_safetensors: tensor \"{}\" has {} bytes, its shape x {} needs {}",
                      t.name, t.data.size(), to_string(t.dtype), bytes));
  }
  io::SafetensorsStreamWriter out(path, headers, metadata);
  for (const TensorToWrite& t : tensors) out.write(t.data);
  out.commit();
}

}  // namespace mxmoe
