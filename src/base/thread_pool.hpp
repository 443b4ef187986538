// A small fork-join pool: the calling thread plus (threads-1) workers. parallel_for hands
// out task indices dynamically; a task must write only its own outputs, so results never
// depend on which thread ran it or on the thread count. No allocation per call.
//
// One job at a time owns the workers. A parallel_for that finds them busy (a second host
// thread, or a nested call from inside a task) runs its tasks on its own calling thread as
// thread 0 of a one-thread pool: never a deadlock, never a wait on another caller's job.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
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

  // Before sleeping on a condition variable, a worker waits this long for the next job, and
  // a caller this long for its job's workers, polling an atomic: a decoded token runs ~250
  // small jobs, and a wake-up through the OS costs ~10-50 us each (measured on a loaded
  // 2-core Zen 4 VM, bench/dense_linear_bench's pool_job). Bounded: idle workers sleep.
  static constexpr std::chrono::microseconds kSpinBeforeSleep{50};

  // Optional, set before any job runs (never during one): polled on a job's calling thread
  // between its tasks, at most every kInterruptPoll. Once it returns true, the job's tasks not
  // yet begun are skipped (their outputs are left unwritten); the caller learns it from
  // interrupt_requested(), which must then also return true. Empty: never polled.
  static constexpr std::chrono::milliseconds kInterruptPoll{10};
  void set_interrupt_check(std::function<bool()> check) { interrupt_ = std::move(check); }
  bool interrupt_requested() const { return interrupt_ && interrupt_(); }

  // Calls fn(task, thread) for every task in [0, tasks), thread in [0, size()) (always 0
  // when the workers were busy with another job). Blocks until all are done (or, once the
  // interrupt check says so, until the tasks already begun are). fn must not throw.
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
  // Thread 0's share of a job (every task when it runs alone): drain() polling the check.
  void drain_polled(std::int64_t tasks, void* ctx, Trampoline fn, std::atomic<std::int64_t>& next);

  std::function<bool()> interrupt_;

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::uint64_t generation_ = 0;
  // generation_ as the spinning workers read it (stored under the mutex, read without it).
  std::atomic<std::uint64_t> published_{0};
  std::atomic<int> busy_{0};  // workers still in the job; the last one notifies under the mutex
  bool stop_ = false;
  // The job in flight.
  void* ctx_ = nullptr;
  Trampoline fn_ = nullptr;
  std::int64_t tasks_ = 0;
  std::atomic<std::int64_t> next_{0};
  std::atomic<bool> claimed_{false};  // a job owns the workers
};

}  // namespace mxmoe
