// The fork-join pool: every task runs exactly once per parallel_for, on a valid thread, for
// back-to-back calls (workers still spinning), calls after the workers fell asleep, and
// pools destroyed while spinning or asleep.
#include "base/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

namespace mxmoe {
namespace {

// Runs `tasks` tasks and checks each ran once on a thread in [0, pool.size()).
void run_and_check(ThreadPool& pool, std::int64_t tasks) {
  std::vector<std::atomic<int>> runs(static_cast<std::size_t>(tasks));
  std::atomic<int> bad_thread{0};
  pool.parallel_for(tasks, [&](std::int64_t t, int thread) {
    runs[static_cast<std::size_t>(t)].fetch_add(1, std::memory_order_relaxed);
    if (thread < 0 || thread >= pool.size()) bad_thread.fetch_add(1);
  });
  for (std::int64_t t = 0; t < tasks; ++t)
    ASSERT_EQ(runs[static_cast<std::size_t>(t)].load(), 1) << "task " << t << " of " << tasks;
  ASSERT_EQ(bad_thread.load(), 0);
}

TEST(ThreadPool, BackToBackCallsRunEveryTaskOnce) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> count(0, 64);
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int call = 0; call < 500; ++call) run_and_check(pool, count(rng));
  }
}

TEST(ThreadPool, CallsAfterTheWorkersSleptStillRunEveryTaskOnce) {
  ThreadPool pool(2);
  for (int call = 0; call < 5; ++call) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // past the spin window
    run_and_check(pool, 97);
  }
}

TEST(ThreadPool, UnevenTasksAreShared) {
  // One slow task must not serialize the rest: with 2 threads, the other thread takes them.
  ThreadPool pool(2);
  std::atomic<int> on_worker{0};
  pool.parallel_for(50, [&](std::int64_t t, int thread) {
    if (t == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (thread == 1) on_worker.fetch_add(1);
  });
  EXPECT_GT(on_worker.load(), 0);
}

TEST(ThreadPool, DestroyedWhileSpinningOrAsleep) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(3);
    run_and_check(pool, 10);  // destroyed right after: workers are spinning
  }
  ThreadPool pool(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(3));  // workers asleep
}

// An interrupt check that answers true ends a job of slow tasks soon after (Ctrl-C in Python):
// the tasks not yet begun are skipped, none runs twice, and the pool serves the next job
// whole. With one thread the job runs on its caller alone and is polled the same way.
TEST(ThreadPool, AnInterruptCheckEndsAJobEarlyAndTheNextJobRunsWhole) {
  using Clock = std::chrono::steady_clock;
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(threads);
    ThreadPool pool(threads);
    std::atomic<bool> stop{false};
    std::atomic<int> polls{0};
    pool.set_interrupt_check([&] {
      polls.fetch_add(1);
      return stop.load();
    });
    EXPECT_FALSE(pool.interrupt_requested());
    constexpr int kTasks = 4000;  // 2 ms each: 8 s of work on one thread
    std::vector<std::atomic<int>> runs(kTasks);
    const auto t0 = Clock::now();
    pool.parallel_for(kTasks, [&](std::int64_t t, int) {
      runs[static_cast<std::size_t>(t)].fetch_add(1);
      if (t == 20) stop.store(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    int ran = 0;
    for (const auto& r : runs) {
      EXPECT_LE(r.load(), 1);
      ran += r.load();
    }
    EXPECT_LT(ran, kTasks / 4) << ran << " tasks ran after the check said stop";
    EXPECT_LT(seconds, 2.0);
    EXPECT_GT(polls.load(), 0);
    EXPECT_TRUE(pool.interrupt_requested());
    stop.store(false);
    run_and_check(pool, 500);
  }
}

}  // namespace
}  // namespace mxmoe
