#include "runtime/thread_pool.hpp"

#include <chrono>

namespace mxmoe {
namespace {

// How long a thread spins for the next job (or for the workers to finish) before it sleeps
// on a condition variable. Waking a sleeping thread costs tens of microseconds on the VMs
// this runs on, which is a large share of a decode-sized call (a few ms, three parallel
// phases); a layer's phases follow each other within microseconds. Bounded, so an idle pool
// does not burn a core.
constexpr auto kSpin = std::chrono::microseconds(200);

void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() or kSpin has passed; returns done().
template <class Done>
bool spin_until(Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  const int workers = threads > 1 ? threads - 1 : 0;
  workers_.reserve(static_cast<std::size_t>(workers));
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this, i] { worker_loop(i + 1); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true, std::memory_order_release);
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

void ThreadPool::run(std::int64_t tasks, void* ctx, Trampoline fn) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1) {
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
    // Release: a worker that sees the new generation (spinning, without the mutex) sees the job.
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  drain(0);
  if (spin_until([this] { return busy_.load(std::memory_order_acquire) == 0; })) return;
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return busy_.load(std::memory_order_acquire) == 0; });
}

void ThreadPool::worker_loop(int thread) {
  std::uint64_t seen = 0;
  auto has_news = [&] {
    return stop_.load(std::memory_order_acquire) ||
           generation_.load(std::memory_order_acquire) != seen;
  };
  for (;;) {
    if (!spin_until(has_news)) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, has_news);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    drain(thread);
    // The last worker out tells run(), under the mutex so a sleeping run() cannot miss it.
    if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mutex_);
      done_.notify_one();
    }
  }
}

}  // namespace mxmoe
