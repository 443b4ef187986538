// The registry of guarded file mappings and the SIGBUS handler (mapped_reads.hpp).
//
// Global state, all of it here and all of it needed by the handler, which can read nothing
// else: the slot table (address ranges, fault flags), the count of open ReadScopes, the
// page size and the handler installed before ours. The handler touches atomics only (no
// lock, no allocation) and calls mmap and sigaction, both plain system calls on Linux.
#include "base/mapped_reads.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "mxmoe/errors.hpp"

namespace mxmoe::mapped_reads {
namespace {

constexpr int kSlots = 4096;  // mapped files at once (a checkpoint maps one per shard)

struct Slot {
  std::atomic<std::uintptr_t> begin{0}, end{0};  // [begin, end); begin 0: free
  std::atomic<bool> faulted{false};
};

std::array<Slot, kSlots> g_slots;
std::atomic<int> g_scopes{0};          // ReadScopes open, all threads
std::atomic<bool> g_any_fault{false};  // a fast "nothing to report" for throw_if_faulted
std::uintptr_t g_page = 4096;
struct sigaction g_previous {};

// Outside the handler only, under g_paths_mutex: the file of each slot, for messages.
std::mutex g_paths_mutex;
std::array<std::string, kSlots> g_paths;

void forward_to_previous(int sig, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler == SIG_DFL || g_previous.sa_handler == SIG_IGN) {
    // The faulting access runs again on return and dies of the default action, as it would
    // have without mxmoe (a bus error cannot be ignored).
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
  } else {
    g_previous.sa_handler(sig);
  }
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  // si_code > 0: raised by the kernel for this access (not kill() or raise()).
  if (info != nullptr && info->si_code > 0 && g_scopes.load(std::memory_order_acquire) > 0) {
    const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
    for (Slot& slot : g_slots) {
      const std::uintptr_t begin = slot.begin.load(std::memory_order_acquire);
      if (begin == 0 || addr < begin || addr >= slot.end.load(std::memory_order_acquire)) continue;
      void* page = reinterpret_cast<void*>(addr / g_page * g_page);
      if (::mmap(page, g_page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
          MAP_FAILED)
        break;
      slot.faulted.store(true, std::memory_order_release);
      g_any_fault.store(true, std::memory_order_release);
      return;
    }
  }
  forward_to_previous(sig, info, context);
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous);
  });
}

}  // namespace

int add(const void* data, std::size_t size, const std::string& path) {
  if (data == nullptr || size == 0) return -1;
  install_handler();
  std::lock_guard lock(g_paths_mutex);
  for (int i = 0; i < kSlots; ++i) {
    Slot& slot = g_slots[static_cast<std::size_t>(i)];
    if (slot.begin.load(std::memory_order_relaxed) != 0) continue;
    g_paths[static_cast<std::size_t>(i)] = path;
    slot.faulted.store(false, std::memory_order_relaxed);
    const auto begin = reinterpret_cast<std::uintptr_t>(data);
    slot.end.store(begin + size, std::memory_order_release);
    slot.begin.store(begin, std::memory_order_release);
    return i;
  }
  return -1;
}

void remove(int slot) noexcept {
  if (slot < 0 || slot >= kSlots) return;
  std::lock_guard lock(g_paths_mutex);
  g_slots[static_cast<std::size_t>(slot)].begin.store(0, std::memory_order_release);
}

ReadScope::ReadScope() noexcept {
  g_scopes.fetch_add(1, std::memory_order_acq_rel);
}

ReadScope::~ReadScope() {
  g_scopes.fetch_sub(1, std::memory_order_acq_rel);
}

std::vector<int> slots_holding(std::span<const std::uintptr_t> pointers) {
  std::vector<int> out;
  for (int i = 0; i < kSlots; ++i) {
    const Slot& slot = g_slots[static_cast<std::size_t>(i)];
    const std::uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    if (begin == 0) continue;
    const std::uintptr_t end = slot.end.load(std::memory_order_acquire);
    if (std::any_of(pointers.begin(), pointers.end(),
                    [&](std::uintptr_t p) { return p >= begin && p < end; }))
      out.push_back(i);
  }
  return out;
}

void drop_resident_around(std::span<const std::uintptr_t> pointers, std::size_t window) noexcept {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t size = std::max<std::uintptr_t>(window, page) / page * page;
  for (const Slot& slot : g_slots) {
    const std::uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    if (begin == 0) continue;
    const std::uintptr_t end = slot.end.load(std::memory_order_acquire);
    for (const std::uintptr_t p : pointers) {
      if (p < begin || p >= end) continue;
      // Whole pages of the mapping only: it starts on a page, and its last page is mapped whole.
      const std::uintptr_t lo = std::max(p / size * size, begin);
      const std::uintptr_t hi = std::min(p / size * size + size, (end + page - 1) / page * page);
      if (hi > lo) (void)::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
    }
  }
}

void throw_if_faulted(std::span<const int> slots) {
  if (!g_any_fault.load(std::memory_order_acquire)) return;
  for (int i : slots) {
    if (i < 0 || i >= kSlots) continue;
    if (!g_slots[static_cast<std::size_t>(i)].faulted.load(std::memory_order_acquire)) continue;
    std::string path;
    {
      std::lock_guard lock(g_paths_mutex);
      path = g_paths[static_cast<std::size_t>(i)];
    }
    throw LoadError(path +
                    ": the file changed on disk while mapped (it is shorter than when it was "
                    "opened: truncated or rewritten); reopen the checkpoint");
  }
}

}  // namespace mxmoe::mapped_reads
