// A small fork-join pool: the calling thread plus (threads-1) workers. parallel_for hands
// out task indices dynamically; a task must write only its own outputs, so results never
// depend on which thread ran it or on the thread count. No allocation per call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace mxmoe {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const noexcept { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(task, thread) for every task in [0, tasks), thread in [0, size()).
  // Blocks until all are done. fn must not throw.
  template <class F>
  void parallel_for(std::int64_t tasks, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run(tasks, &fn,
        [](void* ctx, std::int64_t task, int thread) { (*static_cast<Fn*>(ctx))(task, thread); });
  }

 private:
  using Trampoline = void (*)(void*, std::int64_t, int);
  void run(std::int64_t tasks, void* ctx, Trampoline fn);
  void worker_loop(int thread);
  void drain(int thread);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::uint64_t generation_ = 0;
  int busy_ = 0;
  bool stop_ = false;
  // The job in flight.
  void* ctx_ = nullptr;
  Trampoline fn_ = nullptr;
  std::int64_t tasks_ = 0;
  std::atomic<std::int64_t> next_{0};
};

}  // namespace mxmoe
