// A safetensors file written as a stream: the header (names, dtypes, shapes) first, then each
// tensor's bytes in order, in pieces of any size from any source (an mmap, a generator), so a
// file of many GB is written with a bounded buffer. write_safetensors (io/safetensors.hpp)
// is this with every tensor in memory. Whole or not at all: a temporary file renamed at commit.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/file.hpp"
#include "io/safetensors.hpp"

namespace mxmoe::io {

struct TensorHeader {
  std::string name;
  StDtype dtype = StDtype::U8;
  std::vector<std::uint64_t> shape;
};

// shape x dtype in bytes; std::invalid_argument naming the tensor when that overflows 64 bits or
// is not a whole number of bytes.
std::uint64_t tensor_byte_size(const TensorHeader& tensor);

class SafetensorsStreamWriter {
 public:
  // Checks the tensors (names unique, not "__metadata__" or empty; sizes) and writes the header
  // into a temporary file beside PATH. Throws std::invalid_argument or files::FileError.
  SafetensorsStreamWriter(const std::string& path, std::span<const TensorHeader> tensors,
                          const std::map<std::string, std::string>& metadata);
  // The next bytes of the data buffer: the tensors' bytes in their order, in any pieces. More
  // bytes than the tensors hold is std::invalid_argument.
  void write(std::span<const std::uint8_t> bytes);
  // Every tensor's bytes must have been written (std::invalid_argument otherwise); then the file
  // is flushed and renamed into place.
  void commit();
  std::uint64_t data_bytes() const noexcept { return total_; }

 private:
  std::uint64_t total_ = 0, written_ = 0;
  std::string header_;  // validated before file_ is created (members initialise in this order)
  files::AtomicFile file_;
};

}  // namespace mxmoe::io
