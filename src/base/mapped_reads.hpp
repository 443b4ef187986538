// Reads of file mappings that may change underneath: a checkpoint shard truncated (or
// rewritten shorter) after it was mapped turns a read of the lost pages into SIGBUS, which
// would kill the process. mxmoe reads mappings only inside a ReadScope; a bus error at an
// address of a registered mapping while a scope is open maps a page of zeros there (the read
// completes) and marks the mapping faulted; the reader then calls throw_if_faulted, which
// throws LoadError naming the file. A bus error anywhere else goes to the handler installed
// before (the default: the process dies as it would have). docs/RELIABILITY.md, "Files that
// change while mapped", gives the reasons for this design and its global state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace mxmoe::mapped_reads {

// Registers the read-only mapping [data, data + size) of PATH (installing the SIGBUS handler on
// first use) and returns its slot; -1 when every slot is taken (the mapping is then unguarded).
int add(const void* data, std::size_t size, const std::string& path);
// Unregisters SLOT (before the mapping is unmapped); -1 is ignored.
void remove(int slot) noexcept;

// While one lives, on any thread, bus errors in registered mappings are caught (above).
class ReadScope {
 public:
  ReadScope() noexcept;
  ~ReadScope();
  ReadScope(const ReadScope&) = delete;
  ReadScope& operator=(const ReadScope&) = delete;
};

// The slots of the registered mappings holding any of POINTERS (sorted, distinct).
std::vector<int> slots_holding(std::span<const std::uintptr_t> pointers);
// Drops this process's resident pages around each of POINTERS (madvise MADV_DONTNEED): the
// WINDOW-aligned WINDOW bytes holding it, clipped to the registered mapping that holds it (a
// read fault maps up to 64 KiB around the page read: the kernel's fault-around). For bytes
// read once from pages the process does not otherwise keep (a sample of experts another rank
// holds). Data-safe on the read-only private mappings registered here: the pages stay mapped
// and read back from the file if touched again. Pointers in no registered mapping are skipped.
void drop_resident_around(std::span<const std::uintptr_t> pointers, std::size_t window) noexcept;
// Throws LoadError naming the first mapping of SLOTS that faulted (a read past the end of a
// file that shrank); does nothing, after one atomic load, when no mapping ever faulted.
void throw_if_faulted(std::span<const int> slots);

// F() inside a ReadScope, then throw_if_faulted(SLOTS). When F throws, a fault is reported
// instead (F may have refused the zeros that replaced the lost bytes).
template <class F>
auto read_guarded(std::span<const int> slots, F&& f) {
  const auto scoped = [&] {
    ReadScope scope;
    return f();
  };
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      scoped();
      throw_if_faulted(slots);
    } else {
      auto result = scoped();
      throw_if_faulted(slots);
      return result;
    }
  } catch (...) {
    throw_if_faulted(slots);
    throw;
  }
}

}  // namespace mxmoe::mapped_reads
