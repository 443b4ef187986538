// Runtime (one pool per process, shared by layers) and expert placement.
#include "mxmoe/runtime.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "base/thread_pool.hpp"
#include "layer_fixture.hpp"
#include "mxmoe/log.hpp"
#include "mxmoe/placement.hpp"
#include "runtime/runtime_pool.hpp"

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
  pool_of(r).parallel_for(100, [&](std::int64_t t, int) { ++hits[static_cast<std::size_t>(t)]; });
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
      pool_of(r).parallel_for(kTasks, [&](std::int64_t t, int thread) {
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
  pool_of(r).parallel_for(4, [&](std::int64_t, int) {
    pool_of(r).parallel_for(8, [&](std::int64_t, int thread) {
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

namespace {

// A call's size is bounded before anything is allocated: the slots of one call are numbered
// in 32 bits, so more tokens than max_tokens() is an error naming the bound, and the
// workspace a call needs can be asked for first (what `mxmoe run` compares with the memory
// available).
TEST(LayerBounds, TokensPerCallAreBoundedAndTheWorkspaceIsKnownBeforehand) {
  const mxmoe::LayerSpec spec = layer_test::shrink("gpt-oss-20b", 8, 4, 64, 64);
  const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 3);
  Runtime runtime(1);
  mxmoe::MoeLayer layer(storage.weights(),
                        layer_test::reference_selection(spec, mxmoe::ActivationFormat::f32),
                        runtime);
  EXPECT_EQ(layer.max_tokens(), std::numeric_limits<std::int32_t>::max() / 4);
  const std::size_t one = layer.workspace_bytes(1), many = layer.workspace_bytes(1000);
  EXPECT_GT(one, 0u);
  // At least the per-slot outputs: tokens x top_k x H floats.
  EXPECT_GE(many, std::size_t{1000} * 4 * 64 * sizeof(float));
  EXPECT_GT(many, one);
  try {
    (void)layer.workspace_bytes(layer.max_tokens() + 1);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("32 bits"), std::string::npos) << e.what();
  }
  std::vector<float> x(64), y(64);
  EXPECT_THROW(layer.forward({.tokens = layer.max_tokens() + 1, .x = x.data(), .y = y.data()}),
               std::invalid_argument);
  EXPECT_THROW(layer.forward({.tokens = -1, .x = x.data(), .y = y.data()}), std::invalid_argument);
  EXPECT_EQ(layer.workspace_allocations(), 0u);  // refused before allocating
  layer.forward({.tokens = 1, .x = x.data(), .y = y.data()});
  EXPECT_EQ(layer.workspace_allocations(), 1u);
}

// More threads than logical CPUs is allowed, and said once through the library's log.
TEST(LayerBounds, MoreThreadsThanCpusIsAllowedAndWarned) {
  struct Seen {
    std::string text;
  } seen;
  const auto capture = [](mxmoe::LogCategory, const char* message, void* user) {
    static_cast<Seen*>(user)->text += message;
  };
  const mxmoe::LogSink previous =
      mxmoe::set_log_sink({capture, &seen, static_cast<unsigned>(mxmoe::LogCategory::warning)});
  const int threads = mxmoe::default_thread_count() + 1;
  {
    Runtime runtime(threads);
    EXPECT_EQ(runtime.threads(), threads);
  }
  { Runtime fits(1); }
  mxmoe::set_log_sink(previous);
  EXPECT_NE(seen.text.find(std::to_string(threads) + " threads on a machine with"),
            std::string::npos)
      << seen.text;
  EXPECT_EQ(std::count(seen.text.begin(), seen.text.end(), '\n'), 1);
}

// The hosts' one cache of runtimes (the C API's machine, the Python package): one runtime per
// thread count while someone holds it, 0 meaning the default count, each configured once.
TEST(RuntimeCache, SharesOneRuntimePerThreadCountWhileHeld) {
  const int d = mxmoe::default_thread_count();
  const int n = d == 1 ? 2 : 1;  // a count other than the default (on one CPU, 2 only warns)
  int configured = 0;
  mxmoe::RuntimeCache cache([&](mxmoe::Runtime&) { ++configured; });
  std::shared_ptr<mxmoe::Runtime> some = cache.get(n);
  EXPECT_EQ(some->threads(), n);
  EXPECT_EQ(cache.get(n), some);
  EXPECT_EQ(configured, 1);
  const std::shared_ptr<mxmoe::Runtime> all = cache.get(0);
  EXPECT_NE(all, some);
  EXPECT_EQ(all->threads(), d);
  EXPECT_EQ(cache.get(d), all);
  EXPECT_EQ(configured, 2);

  const std::weak_ptr<mxmoe::Runtime> released = some;
  some.reset();
  EXPECT_TRUE(released.expired());        // the cache does not keep it alive
  EXPECT_EQ(cache.get(n)->threads(), n);  // made again on the next use
  EXPECT_EQ(configured, 3);

  EXPECT_THROW((void)cache.get(-1), std::invalid_argument);
  EXPECT_THROW((void)cache.get(mxmoe::kMaxThreads + 1), std::invalid_argument);
}

}  // namespace
