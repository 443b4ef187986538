#include "mxmoe/runtime.hpp"

#include <stdexcept>
#include <string>
#include <thread>

#include "base/thread_pool.hpp"

namespace mxmoe {

Runtime::Runtime(RuntimeOptions options) : options_(std::move(options)) {
  if (options_.threads < 0 || options_.threads > kMaxThreads)
    throw std::invalid_argument("Runtime: threads must be 0 (all logical CPUs) or 1.." +
                                std::to_string(kMaxThreads) + ", got " +
                                std::to_string(options_.threads));
  for (int cpu : options_.cpu_affinity)
    if (cpu < 0 || cpu >= 65536)
      throw std::invalid_argument("Runtime: cpu_affinity holds " + std::to_string(cpu) +
                                  " (CPU numbers are 0..65535)");
  if (options_.threads == 0)
    options_.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (options_.threads > kMaxThreads) options_.threads = kMaxThreads;
  pool_ = std::make_unique<ThreadPool>(options_.threads, options_.cpu_affinity);
}

Runtime::~Runtime() = default;

int Runtime::threads() const noexcept {
  return pool_->size();
}
const RuntimeOptions& Runtime::options() const noexcept {
  return options_;
}
ThreadPool& Runtime::pool() const noexcept {
  return *pool_;
}

}  // namespace mxmoe
