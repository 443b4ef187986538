// Runtime (one pool per process, shared by layers) and expert placement.
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "base/thread_pool.hpp"
#include "layer_fixture.hpp"
#include "mxmoe/placement.hpp"
#include "mxmoe/runtime.hpp"

namespace {

using mxmoe::ExpertRange;
using mxmoe::Runtime;
using mxmoe::RuntimeOptions;

TEST(Runtime, SizesAndBounds) {
  EXPECT_EQ(Runtime(1).threads(), 1);
  EXPECT_EQ(Runtime(3).threads(), 3);
  EXPECT_GE(Runtime(0).threads(), 1);  // every logical CPU
  EXPECT_THROW(Runtime(-1), std::invalid_argument);
  EXPECT_THROW(Runtime(mxmoe::kMaxThreads + 1), std::invalid_argument);
  EXPECT_THROW(Runtime(RuntimeOptions{2, {0, -3}}), std::invalid_argument);
}

TEST(Runtime, AffinityListIsAcceptedAndWorkStillRuns) {
  // CPU 0 always exists; an out-of-set CPU (beyond the machine) leaves the worker unpinned.
  Runtime r(RuntimeOptions{3, {0, 60000}});
  std::vector<int> hits(100, 0);
  r.pool().parallel_for(100, [&](std::int64_t t, int) { ++hits[static_cast<std::size_t>(t)]; });
  for (int h : hits) EXPECT_EQ(h, 1);
}

// Two host threads share one runtime: each job runs every task exactly once (one may run
// on its caller alone), and neither waits forever.
TEST(Runtime, ConcurrentCallersEachRunTheirWholeJob) {
  Runtime r(2);
  constexpr int kCalls = 200, kTasks = 64;
  std::atomic<int> wrong{0};
  const auto caller = [&] {
    std::vector<int> hits(kTasks);
    for (int c = 0; c < kCalls; ++c) {
      std::fill(hits.begin(), hits.end(), 0);
      r.pool().parallel_for(kTasks, [&](std::int64_t t, int thread) {
        if (thread < 0 || thread >= r.threads()) ++wrong;
        ++hits[static_cast<std::size_t>(t)];
      });
      for (int h : hits) wrong += h != 1;
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Runtime, NestedParallelForRunsInline) {
  Runtime r(2);
  std::atomic<int> inner{0};
  r.pool().parallel_for(4, [&](std::int64_t, int) {
    r.pool().parallel_for(8, [&](std::int64_t, int thread) {
      EXPECT_EQ(thread, 0);
      ++inner;
    });
  });
  EXPECT_EQ(inner.load(), 32);
}

TEST(Placement, SliceExpertsNarrowsTheViews) {
  const auto spec = layer_test::shrink("gpt-oss-20b", 6, 2, 64, 32);
  const auto storage = mxmoe::LayerStorage::random(spec, 3);
  const mxmoe::LayerWeights& w = storage.weights();
  const mxmoe::LayerWeights s = mxmoe::slice_experts(w, {2, 5});
  EXPECT_EQ(s.w1.experts, 3);
  EXPECT_EQ(s.w2.experts, 3);
  EXPECT_EQ(s.w1.row_blocks(0, 0), w.w1.row_blocks(2, 0));
  EXPECT_EQ(s.w2.row_scale(2, 7), w.w2.row_scale(4, 7));
  ASSERT_FALSE(s.b1.empty());
  EXPECT_EQ(s.b1.rows, 3);
  EXPECT_EQ(s.b1.at(0), w.b1.at(2 * w.b1.cols));
  EXPECT_EQ(s.b2.at(s.b2.cols * 2 + 5), w.b2.at(w.b2.cols * 4 + 5));
  EXPECT_EQ(s.router_weight.data, w.router_weight.data);  // routing covers every expert
  EXPECT_THROW(mxmoe::slice_experts(w, {4, 7}), std::invalid_argument);
  EXPECT_THROW(mxmoe::slice_experts(w, {3, 2}), std::invalid_argument);
}

}  // namespace
