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
  // Maps PATH read-only. Throws LoadError naming the file (missing, not a regular file, e.g.
  // a FIFO or /dev/zero, refused at once; mmap failure). An empty file maps to an empty span.
  static MappedFile open(const std::string& path);
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::uint8_t> bytes() const noexcept { return {data_, size_}; }
  const std::string& path() const noexcept { return path_; }
  // Drops this process's resident pages of the whole pages inside SPAN (madvise
  // MADV_DONTNEED), when SPAN lies in this mapping; the bytes stay readable (a later read
  // faults them back in from the file). False (nothing done) when SPAN is not in the mapping.
  bool drop_resident(std::span<const std::uint8_t> span) const noexcept;

 private:
  void release() noexcept;
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  int guard_slot_ = -1;  // base/mapped_reads.hpp: a read of a page the file lost is caught
};

// Reads a JSON document (config.json, an index) whole: a regular file of at most
// files::kMaxJsonBytes. Throws LoadError naming it.
std::string read_text_file(const std::string& path);

}  // namespace mxmoe::io
