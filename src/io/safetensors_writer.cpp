// The safetensors writer (used by `mxmoe quantize` and by tests to build fixtures).
#include <fmt/core.h>

#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "base/file.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/safetensors.hpp"

namespace mxmoe {

void write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> names;
  std::uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__" || t.name.empty())
      throw std::invalid_argument("write_safetensors: reserved tensor name \"" + t.name + "\"");
    if (!names.insert(t.name).second)
      throw std::invalid_argument("write_safetensors: duplicate tensor \"" + t.name + "\"");
    std::uint64_t bits = static_cast<std::uint64_t>(dtype_bits(t.dtype));
    for (const std::uint64_t d : t.shape) bits *= d;  // fixture sizes: no overflow concern
    if (bits % 8 != 0 || bits / 8 != t.data.size())
      throw std::invalid_argument(
          fmt::format("write_safetensors: tensor \"{}\" has {} bytes, its shape x {} needs {} bits",
                      t.name, t.data.size(), to_string(t.dtype), bits));
    header[t.name] = {{"dtype", std::string(to_string(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data buffer 8-byte aligned

  files::AtomicFile out(path);
  std::uint64_t len = text.size();
  char len_bytes[8];
  for (char& b : len_bytes) {
    b = static_cast<char>(len & 0xFF);
    len >>= 8;
  }
  out.write(len_bytes, 8);
  out.write(text);
  for (const TensorToWrite& t : tensors) out.write(t.data.data(), t.data.size());
  out.commit();
}

}  // namespace mxmoe
