#include "base/thread_pool.hpp"

#include <pthread.h>
#include <sched.h>

#include <system_error>

namespace mxmoe {

namespace {

// Process-wide, for fork() only (docs/ARCHITECTURE.md): how many forks separate this process
// from the first one (a child counts one more than its parent), and the lock under which a
// pool replaces its crew. The lock is held across fork() (taken before it, released after it
// in both processes), so a child never inherits it held by a thread that does not exist there.
std::atomic<std::uint64_t> g_forks{0};
std::mutex g_crew_change;

void before_fork() noexcept {
  g_crew_change.lock();
}
void after_fork_in_parent() noexcept {
  g_crew_change.unlock();
}
void after_fork_in_child() noexcept {
  g_forks.fetch_add(1, std::memory_order_relaxed);
  g_crew_change.unlock();
}

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

void watch_forks() {
  static const bool registered =
      ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child) == 0;
  (void)registered;  // without the handlers (ENOMEM), a forked child's pools are never remade
}

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

struct ThreadPool::Crew {
  std::vector<std::thread> workers;
  std::mutex mutex;
  std::condition_variable wake, done;
  std::uint64_t generation = 0;
  // generation as the spinning workers read it (stored under the mutex, read without it).
  std::atomic<std::uint64_t> published{0};
  std::atomic<int> busy{0};  // workers still in the job; the last one notifies under the mutex
  bool stop = false;
  // The job in flight.
  void* ctx = nullptr;
  Trampoline fn = nullptr;
  std::int64_t tasks = 0;
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> claimed{false};  // a job owns the workers
  // In a forked child: the parent's crew, abandoned (its threads are not in this process and
  // its locks may be held by them), kept reachable but never destroyed.
  Crew* abandoned = nullptr;

  // Starts WORKERS threads; throws std::system_error (after joining those it started) when the
  // system refuses one.
  Crew(int workers_wanted, const std::vector<int>& cpu_affinity) {
    workers.reserve(static_cast<std::size_t>(workers_wanted));
    try {
      for (int i = 0; i < workers_wanted; ++i) {
        workers.emplace_back([this, i] { work(i + 1); });
        if (cpu_affinity.empty()) continue;
        const int cpu = cpu_affinity[static_cast<std::size_t>(i + 1) % cpu_affinity.size()];
        if (cpu < 0 || cpu >= CPU_SETSIZE) continue;
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(static_cast<std::size_t>(cpu), &set);
        // A refusal (CPU offline, outside the cgroup) leaves the worker unpinned.
        (void)pthread_setaffinity_np(workers.back().native_handle(), sizeof(set), &set);
      }
    } catch (...) {
      stop_and_join();
      throw;
    }
  }
  ~Crew() { stop_and_join(); }
  Crew(const Crew&) = delete;
  Crew& operator=(const Crew&) = delete;

  void stop_and_join() noexcept {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    wake.notify_all();
    for (auto& w : workers) w.join();
    workers.clear();
  }

  void drain(int thread) {
    for (;;) {
      const std::int64_t task = next.fetch_add(1, std::memory_order_relaxed);
      if (task >= tasks) return;
      fn(ctx, task, thread);
    }
  }

  void work(int thread) {
    std::uint64_t seen = 0;
    for (;;) {
      spin_until([&] { return published.load(std::memory_order_acquire) != seen; });
      {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
      }
      drain(thread);
      if (busy.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard lock(mutex);  // the caller either sees busy == 0 or is waiting
        done.notify_one();
      }
    }
  }
};

ThreadPool::ThreadPool(int threads, const std::vector<int>& cpu_affinity)
    : threads_(threads > 1 ? threads : 1), cpu_affinity_(cpu_affinity) {
  watch_forks();
  const std::lock_guard lock(g_crew_change);
  crew_forks_.store(g_forks.load(std::memory_order_relaxed), std::memory_order_relaxed);
  crew_.store(new Crew(threads_ - 1, cpu_affinity_), std::memory_order_release);
}

ThreadPool::~ThreadPool() {
  Crew* crew = crew_.load(std::memory_order_acquire);
  // A crew made by an ancestor process is abandoned, not destroyed: joining its threads, which
  // are not here, would wait forever.
  if (crew_forks_.load(std::memory_order_acquire) == g_forks.load(std::memory_order_acquire))
    delete crew;
}

ThreadPool::Crew& ThreadPool::crew() {
  const std::uint64_t forks = g_forks.load(std::memory_order_acquire);
  if (crew_forks_.load(std::memory_order_acquire) == forks)
    return *crew_.load(std::memory_order_acquire);
  // The first job of this pool in a forked child: start this process's own workers.
  const std::lock_guard lock(g_crew_change);
  if (crew_forks_.load(std::memory_order_acquire) != forks) {
    Crew* fresh = nullptr;
    try {
      fresh = new Crew(threads_ - 1, cpu_affinity_);
    } catch (const std::system_error&) {
      fresh = new Crew(0, {});  // no thread to be had: every job runs on its caller's thread
    }
    fresh->abandoned = crew_.load(std::memory_order_relaxed);
    crew_.store(fresh, std::memory_order_release);
    crew_forks_.store(forks, std::memory_order_release);
  }
  return *crew_.load(std::memory_order_acquire);
}

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
  Crew& c = crew();
  if (c.workers.empty() || tasks == 1 || c.claimed.exchange(true, std::memory_order_acquire)) {
    if (interrupt_ && tasks > 1) {
      std::atomic<std::int64_t> next{0};  // this thread's own job: no worker shares it
      drain_polled(tasks, ctx, fn, next);
      return;
    }
    for (std::int64_t t = 0; t < tasks; ++t) fn(ctx, t, 0);
    return;
  }
  {
    std::lock_guard lock(c.mutex);
    c.ctx = ctx;
    c.fn = fn;
    c.tasks = tasks;
    c.next.store(0, std::memory_order_relaxed);
    c.busy.store(static_cast<int>(c.workers.size()), std::memory_order_relaxed);
    ++c.generation;
    c.published.store(c.generation, std::memory_order_release);
  }
  c.wake.notify_all();
  if (interrupt_)
    drain_polled(tasks, ctx, fn, c.next);
  else
    c.drain(0);
  if (!spin_until([&c] { return c.busy.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock lock(c.mutex);
    c.done.wait(lock, [&c] { return c.busy.load(std::memory_order_acquire) == 0; });
  }
  c.claimed.store(false, std::memory_order_release);
}

}  // namespace mxmoe
