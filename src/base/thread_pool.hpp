// A small fork-join pool: the calling thread plus (threads-1) workers. parallel_for hands
// out task indices dynamically; a task must write only its own outputs, so results never
// depend on which thread ran it or on the thread count. No allocation per call.
//
// One job at a time owns the workers. A parallel_for that finds them busy (a second host
// thread, or a nested call from inside a task) runs its tasks on its own calling thread as
// thread 0 of a one-thread pool: never a deadlock, never a wait on another caller's job.
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
  // cpu_affinity: optional; worker t (1..threads-1) is pinned to cpu_affinity[t % n]. A CPU
  // the OS refuses is ignored (the worker runs unpinned).
  explicit ThreadPool(int threads, const std::vector<int>& cpu_affinity = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const noexcept { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(task, thread) for every task in [0, tasks), thread in [0, size()) (always 0
  // when the workers were busy with another job). Blocks until all are done. fn must not
  // throw.
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
  std::atomic<bool> claimed_{false};  // a job owns the workers
};

}  // namespace mxmoe
