#include "base/thread_pool.hpp"

#include <pthread.h>
#include <sched.h>

namespace mxmoe {

namespace {
// Polls done() for at most ThreadPool::kSpinBeforeSleep; true when it held. Between polls
// the thread yields its CPU, so on an oversubscribed machine the thread it waits for (or
// anyone else) runs instead of the spin.
template <class Done>
bool spin_until(Done&& done) noexcept {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point until = Clock::now() + ThreadPool::kSpinBeforeSleep;
  for (;;) {
    for (int i = 0; i < 16; ++i)
      if (done()) return true;
    if (Clock::now() >= until) return false;
    std::this_thread::yield();
  }
}
}  // namespace

ThreadPool::ThreadPool(int threads, const std::vector<int>& cpu_affinity) {
  const int workers = threads > 1 ? threads - 1 : 0;
  workers_.reserve(static_cast<std::size_t>(workers));
  for (int i = 0; i < workers; ++i) {
    workers_.emplace_back([this, i] { worker_loop(i + 1); });
    if (cpu_affinity.empty()) continue;
    const int cpu = cpu_affinity[static_cast<std::size_t>(i + 1) % cpu_affinity.size()];
    if (cpu < 0 || cpu >= CPU_SETSIZE) continue;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(static_cast<std::size_t>(cpu), &set);
    // A refusal (CPU offline, outside the cgroup) leaves the worker unpinned.
    (void)pthread_setaffinity_np(workers_.back().native_handle(), sizeof(set), &set);
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::drain(int thread) {
  for (;;) {
    const std::int64_t task = next_.fetch_add(1, std::memory_order_relaxed);
    if (task >= tasks_) return;
    fn_(ctx_, task, thread);
  }
}

namespace {
// The check, asked between tasks: one that throws counts as "stop" here (the job must end
// joined, its workers done with the caller's frame); the caller's own interrupt_requested()
// then meets the exception again.
bool asks_to_stop(const std::function<bool()>& check) noexcept {
  try {
    return check();
  } catch (...) {
    return true;
  }
}
}  // namespace

void ThreadPool::drain_polled(std::int64_t tasks, void* ctx, Trampoline fn,
                              std::atomic<std::int64_t>& next) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point poll_at = Clock::now() + kInterruptPoll;
  for (;;) {
    const std::int64_t task = next.fetch_add(1, std::memory_order_relaxed);
    if (task >= tasks) return;
    fn(ctx, task, 0);
    if (const Clock::time_point now = Clock::now(); now >= poll_at) {
      if (asks_to_stop(interrupt_)) {
        next.store(tasks, std::memory_order_relaxed);  // the workers take no further task
        return;
      }
      poll_at = now + kInterruptPoll;
    }
  }
}

void ThreadPool::run(std::int64_t tasks, void* ctx, Trampoline fn) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1 || claimed_.exchange(true, std::memory_order_acquire)) {
    if (interrupt_ && tasks > 1) {
      std::atomic<std::int64_t> next{0};  // this thread's own job: no worker shares it
      drain_polled(tasks, ctx, fn, next);
      return;
    }
    for (std::int64_t t = 0; t < tasks; ++t) fn(ctx, t, 0);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    ctx_ = ctx;
    fn_ = fn;
    tasks_ = tasks;
    next_.store(0, std::memory_order_relaxed);
    busy_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    ++generation_;
    published_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  if (interrupt_)
    drain_polled(tasks, ctx, fn, next_);
  else
    drain(0);
  if (!spin_until([this] { return busy_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return busy_.load(std::memory_order_acquire) == 0; });
  }
  claimed_.store(false, std::memory_order_release);
}

void ThreadPool::worker_loop(int thread) {
  std::uint64_t seen = 0;
  for (;;) {
    spin_until([&] { return published_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    drain(thread);
    if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mutex_);  // the caller either sees busy_ == 0 or is waiting
      done_.notify_one();
    }
  }
}

}  // namespace mxmoe
