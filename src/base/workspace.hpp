// One 64-byte-aligned scratch buffer that only grows, and counts how often it grew: after
// a warm-up call at a given size, forward() allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

namespace mxmoe {

class Workspace {
 public:
  static constexpr std::size_t kAlign = 64;
  Workspace() = default;
  ~Workspace() { release(); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // At least `bytes`, 64-byte aligned; the old contents are not kept.
  std::byte* reserve(std::size_t bytes) {
    if (bytes > size_) {
      release();
      data_ = static_cast<std::byte*>(::operator new (bytes, std::align_val_t{kAlign}));
      size_ = bytes;
      ++growths_;
    }
    return data_;
  }
  std::size_t size() const noexcept { return size_; }
  std::uint64_t growths() const noexcept { return growths_; }

 private:
  void release() noexcept {
    if (data_ != nullptr) ::operator delete (data_, std::align_val_t{kAlign});
    data_ = nullptr;
    size_ = 0;
  }
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::uint64_t growths_ = 0;
};

// Carves 64-byte-aligned regions out of a workspace: first with base == nullptr to measure,
// then with the real base to hand out pointers at the same offsets.
class Carver {
 public:
  explicit Carver(std::byte* base) : base_(base) {}
  template <class T>
  T* take(std::size_t count) {
    std::byte* p = base_ == nullptr ? nullptr : base_ + used_;
    used_ += (count * sizeof(T) + Workspace::kAlign - 1) / Workspace::kAlign * Workspace::kAlign;
    return reinterpret_cast<T*>(p);
  }
  std::byte* take_bytes(std::size_t n) { return take<std::byte>(n); }
  std::size_t used() const noexcept { return used_; }

 private:
  std::byte* base_;
  std::size_t used_ = 0;
};

}  // namespace mxmoe
