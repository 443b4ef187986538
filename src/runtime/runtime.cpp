#include "mxmoe/runtime.hpp"

#include <sched.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

#include "mxmoe/log.hpp"
#include "runtime/runtime_pool.hpp"

namespace mxmoe {

int default_thread_count() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = 0;
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus <= 0) cpus = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cpus, 1, kMaxThreads);
}

Runtime::Runtime(RuntimeOptions options) : options_(std::move(options)) {
  if (options_.threads < 0 || options_.threads > kMaxThreads)
    throw std::invalid_argument("Runtime: threads must be 0 (all logical CPUs) or 1.." +
                                std::to_string(kMaxThreads) + ", got " +
                                std::to_string(options_.threads));
  for (int cpu : options_.cpu_affinity)
    if (cpu < 0 || cpu >= 65536)
      throw std::invalid_argument("Runtime: cpu_affinity holds " + std::to_string(cpu) +
                                  " (CPU numbers are 0..65535)");
  const int cpus = default_thread_count();
  if (options_.threads == 0) options_.threads = cpus;
  if (options_.threads > cpus && log_enabled(LogCategory::warning))
    log_message(
        LogCategory::warning,
        ("mxmoe: warning: " + std::to_string(options_.threads) + " threads on a machine with " +
         std::to_string(cpus) + " logical CPUs: allowed, but the extra threads only contend\n")
            .c_str());
  impl_ = std::make_unique<Impl>(options_.threads, options_.cpu_affinity);
}

Runtime::~Runtime() = default;

int Runtime::threads() const noexcept {
  return impl_->pool.size();
}
const RuntimeOptions& Runtime::options() const noexcept {
  return options_;
}
void Runtime::set_interrupt_check(std::function<bool()> check) {
  impl_->pool.set_interrupt_check(std::move(check));
}
Runtime::Impl& Runtime::impl() const noexcept {
  return *impl_;
}

RuntimeCache::RuntimeCache(std::function<void(Runtime&)> configure)
    : configure_(std::move(configure)) {}

std::shared_ptr<Runtime> RuntimeCache::get(int threads) {
  if (threads < 0 || threads > kMaxThreads)
    throw std::invalid_argument("threads: expected 0 (every logical CPU) or 1.." +
                                std::to_string(kMaxThreads) + ", got " + std::to_string(threads));
  if (threads == 0) threads = default_thread_count();
  const std::lock_guard lock(mutex_);
  std::weak_ptr<Runtime>& slot = runtimes_[threads];
  std::shared_ptr<Runtime> r = slot.lock();
  if (!r) {
    r = std::make_shared<Runtime>(threads);
    if (configure_) configure_(*r);
    slot = r;
  }
  return r;
}

}  // namespace mxmoe
