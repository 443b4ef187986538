#include "cli/watchdog.hpp"

#include <unistd.h>

#include <cerrno>
#include <utility>

namespace mxmoe::cli {

Watchdog::Watchdog(double seconds, std::function<std::string()> message, int code)
    : message_(std::move(message)), code_(code) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(seconds));
  thread_ = std::thread([this, deadline] { watch(deadline); });
}

Watchdog::~Watchdog() {
  disarm();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::disarm() noexcept {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    disarmed_ = true;
  }
  cv_.notify_all();
}

void Watchdog::watch(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (cv_.wait_until(lock, deadline, [this] { return disarmed_; })) return;
  // Fired. The text is made here, before anything is written; the lock held is this object's
  // own (disarm() may wait for it: the process ends first).
  std::string line;
  try {
    line = message_();
  } catch (...) {
    line = "mxmoe: error: a blocking step outlasted its deadline\n";
  }
  const char* p = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  ::_exit(code_);
}

}  // namespace mxmoe::cli
