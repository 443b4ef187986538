#include "io/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "base/file.hpp"
#include "base/mapped_reads.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe::io {

namespace {
std::string errno_text() {
  return std::strerror(errno);
}
}  // namespace

bool MappedFile::drop_resident(std::span<const std::uint8_t> span) const noexcept {
  const auto lo = reinterpret_cast<std::uintptr_t>(span.data());
  const auto hi = lo + span.size();
  const auto begin = reinterpret_cast<std::uintptr_t>(data_);
  if (span.empty() || lo < begin || hi > begin + size_) return false;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t first = (lo + page - 1) / page * page, last = hi / page * page;
  // A private read-only file mapping: dropped pages read back from the file, never as zeros.
  if (last > first) (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  return true;
}

MappedFile MappedFile::open(const std::string& path) {
  std::string error;
  const std::optional<files::OpenedFile> opened = files::try_open_regular_file(path, error);
  if (!opened) throw LoadError(error);
  const int fd = opened->fd;
  if (opened->size > std::numeric_limits<std::size_t>::max()) {
    ::close(fd);
    throw LoadError(path + ": too large to map");
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<std::size_t>(opened->size);
  if (file.size_ > 0) {
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const std::string why = errno_text();
      ::close(fd);
      throw LoadError(path + ": mmap failed: " + why);
    }
    file.data_ = static_cast<const std::uint8_t*>(p);
    file.guard_slot_ = mapped_reads::add(p, file.size_, path);
  }
  ::close(fd);  // the mapping keeps the file alive
  return file;
}

MappedFile::~MappedFile() {
  release();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      guard_slot_(std::exchange(other.guard_slot_, -1)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    guard_slot_ = std::exchange(other.guard_slot_, -1);
  }
  return *this;
}

void MappedFile::release() noexcept {
  mapped_reads::remove(std::exchange(guard_slot_, -1));
  if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

std::string read_text_file(const std::string& path) {
  return files::read_regular_file<LoadError>(path, files::kMaxJsonBytes);
}

}  // namespace mxmoe::io
