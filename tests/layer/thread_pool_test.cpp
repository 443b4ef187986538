// The fork-join pool: every task runs exactly once per parallel_for, on a valid thread, for
// back-to-back calls (workers still spinning), calls after the workers fell asleep, and
// pools destroyed while spinning or asleep, and pools used in a forked child.
#include "base/thread_pool.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
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

// Runs BODY in a forked child and returns its exit status; -1 when the child had not ended
// after 30 s (a hang: it is killed).
int exit_status_in_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  if (pid < 0) return -2;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// In the child: 0 when a job of slow tasks ran every task once with a worker taking part.
int job_runs_on_workers(ThreadPool& pool) {
  constexpr int kTasks = 64;
  std::vector<std::atomic<int>> runs(kTasks);
  std::atomic<int> on_workers{0};
  pool.parallel_for(kTasks, [&](std::int64_t t, int thread) {
    runs[static_cast<std::size_t>(t)].fetch_add(1);
    if (thread != 0) on_workers.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  for (const auto& r : runs)
    if (r.load() != 1) return 3;
  return on_workers.load() > 0 ? 0 : 4;
}

// Issue 38: a pool whose workers had run waited forever at its first job in a forked child
// (the workers are not copied by fork). The child starts its own workers; destroying the pool
// there returns too (it never joins the parent's threads).
TEST(ThreadPool, AForkedChildRunsJobsOnItsOwnWorkers) {
  ThreadPool pool(3);
  run_and_check(pool, 100);
  EXPECT_EQ(exit_status_in_child([&] { return job_runs_on_workers(pool); }), 0);
  // A pool destroyed in the child, after a job there or without one.
  for (bool job_first : {true, false}) {
    auto* doomed = new ThreadPool(3);
    run_and_check(*doomed, 100);
    EXPECT_EQ(exit_status_in_child([&] {
                const int status = job_first ? job_runs_on_workers(*doomed) : 0;
                delete doomed;
                return status;
              }),
              0)
        << "job_first " << job_first;
    delete doomed;
  }
  run_and_check(pool, 100);  // the parent's workers are untouched
}

// A fork while another thread's job holds the workers (the child inherits them claimed), and
// the child's own child, which never used the pool in between.
TEST(ThreadPool, AChildForkedDuringAJobAndAGrandchildRunOnWorkers) {
  ThreadPool pool(3);
  std::atomic<bool> in_job{false}, release{false};
  std::thread busy([&] {
    pool.parallel_for(8, [&](std::int64_t, int) {
      in_job.store(true);
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  });
  while (!in_job.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(exit_status_in_child([&] { return job_runs_on_workers(pool); }), 0);
  release.store(true);
  busy.join();
  EXPECT_EQ(exit_status_in_child(
                [&] { return exit_status_in_child([&] { return job_runs_on_workers(pool); }); }),
            0);
}

}  // namespace
}  // namespace mxmoe
