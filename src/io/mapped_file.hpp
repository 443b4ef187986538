// A read-only memory mapping of one whole file (RAII). Tensor views point into it, so it
// lives as long as the Checkpoint that handed them out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace mxmoe::io {

class MappedFile {
 public:
  // Maps PATH read-only. Throws LoadError naming the file (missing, not a regular file,
  // mmap failure). An empty file maps to an empty span.
  static MappedFile open(const std::string& path);
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::uint8_t> bytes() const noexcept { return {data_, size_}; }
  const std::string& path() const noexcept { return path_; }

 private:
  void release() noexcept;
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// Reads a small text file (config.json, an index) whole. Throws LoadError naming it.
std::string read_text_file(const std::string& path);

// Writes PATH whole or not at all: the bytes go to a temporary file in the same directory,
// which is renamed over PATH only once every byte is written. Throws LoadError naming PATH.
void write_file_atomic(const std::string& path, std::span<const std::uint8_t> bytes);

// The temporary file write_file_atomic (and streaming writers) use for PATH, and its commit:
// rename over PATH (LoadError naming PATH on failure; the temporary is removed).
std::string partial_path(const std::string& path);
void commit_partial(const std::string& path);

}  // namespace mxmoe::io
