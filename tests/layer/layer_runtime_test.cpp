// MoeLayer's runtime behaviour: no allocation after warm-up, thread-count independence,
// expert parallelism, the forward variants and their input checks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>

#include "base/thread_pool.hpp"
#include "layer/layer_fixture.hpp"
#include "layer/naive_moe.hpp"
#include "mxmoe/format.hpp"
#include "mxmoe/runtime.hpp"
#include "routing/routing.hpp"
#include "runtime/layer_steps.hpp"
#include "test_runtime.hpp"

// Counts every global allocation of this test binary (a test-only replacement). Not under
// AddressSanitizer: its own operator new must stay in charge there (memory it allocates in
// shared libraries would otherwise be freed by this file's operator delete).
#if defined(__SANITIZE_ADDRESS__)
#define MXMOE_COUNT_ALLOCATIONS 0
#else
#define MXMOE_COUNT_ALLOCATIONS 1
#endif
namespace {
std::atomic<std::uint64_t> g_allocations{0};
}  // namespace
#if MXMOE_COUNT_ALLOCATIONS
namespace {
void* counted_alloc(std::size_t n, std::size_t align) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p =
      align <= alignof(std::max_align_t)
          ? std::malloc(n == 0 ? 1 : n)
          : std::aligned_alloc(align, (std::max<std::size_t>(n, 1) + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) {
  return counted_alloc(n, 0);
}
void* operator new[](std::size_t n) {
  return counted_alloc(n, 0);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
#endif

namespace {

using layer_test::reference_selection;
using layer_test::shrink;
using mxmoe::ActivationFormat;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(LayerRuntime, NoAllocationAfterWarmUp) {
  for (ActivationFormat f : mxmoe::all_activation_formats()) {
    SCOPED_TRACE(std::string(mxmoe::to_string(f)));
    const auto spec = shrink("deepseek-v3", 16, 4, 64, 32);  // shared expert included
    const auto storage = mxmoe::LayerStorage::random(spec, 1);
    mxmoe::MoeLayer layer =
        mxmoe::testing::test_layer(storage.weights(), reference_selection(spec, f, 2));
    const auto x = layer_test::random_input(spec, 33, 2);
    std::vector<float> y(x.size());
    layer.forward({.tokens = 33, .x = x.data(), .y = y.data()});  // warm-up at 33 tokens
    const std::uint64_t grown = layer.workspace_allocations();
    const std::uint64_t before = g_allocations.load();
    for (std::int64_t tokens : {33, 1, 17, 33})
      layer.forward({.tokens = tokens, .x = x.data(), .y = y.data()});
    if (MXMOE_COUNT_ALLOCATIONS) {
      EXPECT_EQ(g_allocations.load(), before) << "forward allocated after warm-up";
    }
    EXPECT_EQ(layer.workspace_allocations(), grown);
    layer.forward({.tokens = 0, .x = x.data(), .y = y.data()});
    if (MXMOE_COUNT_ALLOCATIONS) {
      EXPECT_EQ(g_allocations.load(), before);
    }
  }
}

TEST(LayerRuntime, WorkspaceGrowsOnlyForLargerCalls) {
  const auto spec = shrink("gpt-oss-20b", 4, 2, 64, 64);
  const auto storage = mxmoe::LayerStorage::random(spec, 3);
  mxmoe::MoeLayer layer = mxmoe::testing::test_layer(
      storage.weights(), reference_selection(spec, ActivationFormat::f32));
  const auto x = layer_test::random_input(spec, 40, 4);
  std::vector<float> y(x.size());
  EXPECT_EQ(layer.workspace_allocations(), 0u);
  layer.forward({.tokens = 10, .x = x.data(), .y = y.data()});
  EXPECT_EQ(layer.workspace_allocations(), 1u);
  layer.forward({.tokens = 5, .x = x.data(), .y = y.data()});
  EXPECT_EQ(layer.workspace_allocations(), 1u);
  layer.forward({.tokens = 40, .x = x.data(), .y = y.data()});
  EXPECT_EQ(layer.workspace_allocations(), 2u);
}

TEST(LayerRuntime, ThreadCountDoesNotChangeBits) {
  for (ActivationFormat f : mxmoe::all_activation_formats()) {
    SCOPED_TRACE(std::string(mxmoe::to_string(f)));
    const auto spec = shrink("deepseek-v4-flash", 8, 3, 96, 64);
    const auto storage = mxmoe::LayerStorage::random(spec, 5);
    mxmoe::MoeLayer layer =
        mxmoe::testing::test_layer(storage.weights(), reference_selection(spec, f, 1));
    const auto x = layer_test::random_input(spec, 21, 6);
    std::vector<float> one(x.size()), two(x.size());
    layer.forward({.tokens = 21, .x = x.data(), .y = one.data()});
    layer.set_runtime(mxmoe::testing::test_runtime(2));
    EXPECT_EQ(layer.threads(), 2);
    layer.forward({.tokens = 21, .x = x.data(), .y = two.data()});
    EXPECT_TRUE(same_bits(one, two));
  }
}

// A runtime whose interrupt check says stop (Ctrl-C in Python): a long call is cut short and
// throws Interrupted soon after, from every forward form; a call shorter than the pool's poll
// interval never asks the check (Python's takes the GIL: a decode call must not pay for it);
// once the check says go on, the same layer gives the bits of an uninterrupted call.
TEST(LayerRuntime, AnInterruptedCallThrowsSoonAndTheLayerStaysUsable) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const auto spec = shrink("deepseek-v3", 16, 4, 256, 128);  // shared expert included
  const auto storage = mxmoe::LayerStorage::random(spec, 11);
  mxmoe::Runtime runtime(2);
  std::atomic<bool> stop{false};
  std::atomic<int> asked{0};
  runtime.set_interrupt_check([&] {
    asked.fetch_add(1);
    return stop.load();
  });
  mxmoe::MoeLayer layer(storage.weights(), reference_selection(spec, ActivationFormat::f32),
                        runtime);
  // Tokens enough for a call of at least 0.3 s on the reference backend.
  std::int64_t tokens = 64;
  std::vector<float> x, expected;
  double full = 0;
  for (;; tokens *= 2) {
    x = layer_test::random_input(spec, tokens, 12);
    expected.assign(x.size(), 0.0f);
    const auto t0 = Clock::now();
    layer.forward({.tokens = tokens, .x = x.data(), .y = expected.data()});
    full = seconds(t0);
    if (full >= 0.3 || tokens >= 16384) break;
  }
  ASSERT_GE(full, 0.1) << tokens << " tokens took " << full << " s only";
  std::vector<float> y(x.size());
  std::vector<std::uint16_t> x16(x.size()), y16(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) x16[i] = mxmoe::f32_to_bf16(x[i]);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * spec.top_k));
  std::vector<float> weights(ids.size(), 0.25f);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(i % 16);

  stop.store(true);
  const auto cut = [&](const char* what, const auto& call) {
    SCOPED_TRACE(what);
    const auto t0 = Clock::now();
    EXPECT_THROW(call(), mxmoe::Interrupted);
    EXPECT_LT(seconds(t0), full / 2) << "a " << full << " s call was not cut short";
  };
  cut("forward", [&] { layer.forward({.tokens = tokens, .x = x.data(), .y = y.data()}); });
  cut("forward_bf16",
      [&] { layer.forward({.tokens = tokens, .x_bf16 = x16.data(), .y_bf16 = y16.data()}); });
  cut("forward_routed", [&] {
    layer.forward({.tokens = tokens,
                   .x = x.data(),
                   .y = y.data(),
                   .expert_ids = ids.data(),
                   .expert_weights = weights.data()});
  });
  // A one-token call ends before the first poll: the check is not asked, the call completes.
  // On a loaded machine a descheduled thread can stretch one of the call's jobs past the poll
  // interval; then the check is asked (it says stop) and the call must be cut: it throws, and
  // only after the interval. A call that did not throw must not have asked, and gives the
  // uninterrupted bits. A few attempts, until one runs untouched (the first, when quiet).
  const double interval =
      std::chrono::duration<double>(mxmoe::ThreadPool::kInterruptPoll).count();
  bool untouched = false;
  for (int attempt = 0; attempt < 20 && !untouched; ++attempt) {
    asked.store(0);
    bool threw = false;
    const auto t0 = Clock::now();
    try {
      layer.forward({.tokens = 1, .x = x.data(), .y = y.data()});
    } catch (const mxmoe::Interrupted&) {
      threw = true;
    }
    const double took = seconds(t0);
    if (threw) {
      EXPECT_GT(asked.load(), 0) << "cut short without asking the check";
      EXPECT_GE(took, interval) << "a one-token call asked the check before the poll interval";
    } else {
      EXPECT_EQ(asked.load(), 0) << "the check said stop, yet the call returned";
      EXPECT_EQ(std::memcmp(y.data(), expected.data(), static_cast<std::size_t>(spec.hidden) * 4),
                0);
      untouched = true;
    }
  }
  if (!untouched)
    std::cerr << "note: every one-token call outlasted the poll interval (a loaded machine)\n";

  stop.store(false);
  layer.forward({.tokens = tokens, .x = x.data(), .y = y.data()});
  EXPECT_TRUE(same_bits(y, expected));
}

TEST(LayerRuntime, TokenAloneEqualsTokenInBatch) {
  const auto spec = shrink("gpt-oss-20b", 6, 2, 96, 64);
  const auto storage = mxmoe::LayerStorage::random(spec, 7);
  mxmoe::MoeLayer layer = mxmoe::testing::test_layer(
      storage.weights(), reference_selection(spec, ActivationFormat::int8, 2));
  const std::int64_t tokens = 13;
  const auto x = layer_test::random_input(spec, tokens, 8);
  std::vector<float> batch(x.size()), alone(static_cast<std::size_t>(spec.hidden));
  layer.forward({.tokens = tokens, .x = x.data(), .y = batch.data()});
  for (std::int64_t t = 0; t < tokens; ++t) {
    layer.forward({.tokens = 1, .x = x.data() + t * spec.hidden, .y = alone.data()});
    EXPECT_EQ(
        std::memcmp(alone.data(), batch.data() + t * spec.hidden, alone.size() * sizeof(float)), 0)
        << "token " << t;
  }
}

TEST(LayerRuntime, ForwardVariantsAgree) {
  const auto spec = shrink("qwen3-30b-a3b", 8, 2, 64, 32);
  const auto storage = mxmoe::LayerStorage::random(spec, 13);
  mxmoe::MoeLayer layer = mxmoe::testing::test_layer(
      storage.weights(), reference_selection(spec, ActivationFormat::f32));
  const std::int64_t tokens = 6;
  const auto x = layer_test::random_input(spec, tokens, 14);
  std::vector<float> y(x.size()), y_logits(x.size()), y_routed(x.size());
  layer.forward({.tokens = tokens, .x = x.data(), .y = y.data()});

  // Logits as the runtime computes them (router weights . x), then the routing they give.
  const auto& w = storage.weights();
  std::vector<float> logits(static_cast<std::size_t>(tokens * spec.num_experts));
  for (std::int64_t t = 0; t < tokens; ++t)
    for (int e = 0; e < spec.num_experts; ++e) {
      double v = 0;
      for (int h = 0; h < spec.hidden; ++h)
        v += static_cast<double>(w.router_weight.at(std::int64_t{e} * spec.hidden + h)) *
             static_cast<double>(x[static_cast<std::size_t>(t * spec.hidden + h)]);
      logits[static_cast<std::size_t>(t * spec.num_experts + e)] = static_cast<float>(v);
    }
  layer.forward(
      {.tokens = tokens, .x = x.data(), .y = y_logits.data(), .router_logits = logits.data()});
  EXPECT_LT(naive::relative_l2(y_logits, y), 1e-6);

  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * spec.top_k));
  std::vector<float> weights(ids.size());
  std::vector<float> scratch(mxmoe::routing_scratch_floats(spec));
  mxmoe::route_logits(spec, logits.data(), nullptr, tokens, ids.data(), weights.data(), scratch);
  layer.forward({.tokens = tokens,
                 .x = x.data(),
                 .y = y_routed.data(),
                 .expert_ids = ids.data(),
                 .expert_weights = weights.data()});
  EXPECT_TRUE(same_bits(y_routed, y_logits));

  // bf16 in/out: the same layer on the bf16-rounded input, output rounded to bf16.
  std::vector<std::uint16_t> xb(x.size()), yb(x.size());
  std::vector<float> xr(x.size()), yr(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    xb[i] = mxmoe::f32_to_bf16(x[i]);
    xr[i] = mxmoe::bf16_to_f32(xb[i]);
  }
  layer.forward({.tokens = tokens, .x_bf16 = xb.data(), .y_bf16 = yb.data()});
  layer.forward({.tokens = tokens, .x = xr.data(), .y = yr.data()});
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(yb[i], mxmoe::f32_to_bf16(yr[i])) << i;
}

TEST(LayerRuntime, ForwardRoutedRejectsBadRouting) {
  const auto spec = shrink("mixtral-8x7b", 4, 2, 64, 32);
  const auto storage = mxmoe::LayerStorage::random(spec, 15);
  mxmoe::MoeLayer layer = mxmoe::testing::test_layer(
      storage.weights(), reference_selection(spec, ActivationFormat::f32));
  const auto x = layer_test::random_input(spec, 2, 16);
  std::vector<float> y(x.size());
  const float good_w[] = {0.5f, 0.5f, 0.7f, 0.3f};
  const std::int32_t out_of_range[] = {0, 1, 2, 4};
  const std::int32_t negative[] = {-1, 1, 2, 3};
  const std::int32_t duplicate[] = {0, 1, 3, 3};
  EXPECT_THROW(layer.forward({.tokens = 2,
                              .x = x.data(),
                              .y = y.data(),
                              .expert_ids = out_of_range,
                              .expert_weights = good_w}),
               std::invalid_argument);
  EXPECT_THROW(layer.forward({.tokens = 2,
                              .x = x.data(),
                              .y = y.data(),
                              .expert_ids = negative,
                              .expert_weights = good_w}),
               std::invalid_argument);
  EXPECT_THROW(layer.forward({.tokens = 2,
                              .x = x.data(),
                              .y = y.data(),
                              .expert_ids = duplicate,
                              .expert_weights = good_w}),
               std::invalid_argument);
  const std::int32_t ok[] = {0, 1, 2, 3};
  const float nan_w[] = {0.5f, 0.5f, std::numeric_limits<float>::quiet_NaN(), 0.3f};
  EXPECT_THROW(
      layer.forward(
          {.tokens = 2, .x = x.data(), .y = y.data(), .expert_ids = ok, .expert_weights = nan_w}),
      std::invalid_argument);
  EXPECT_NO_THROW(layer.forward(
      {.tokens = 2, .x = x.data(), .y = y.data(), .expert_ids = ok, .expert_weights = good_w}));
}

// The one input check of every forward form (mxmoe/edge_checks.hpp): NaN/Inf in x is refused
// naming the token, before any backend sees it (backends would disagree: finite garbage on
// some, NaN on others); a negative routing weight is refused as a NaN one is.
TEST(LayerRuntime, EveryForwardRefusesNonFiniteInputNamingTheToken) {
  const auto spec = shrink("mixtral-8x7b", 4, 2, 64, 32);
  const auto storage = mxmoe::LayerStorage::random(spec, 15);
  mxmoe::MoeLayer layer = mxmoe::testing::test_layer(
      storage.weights(), reference_selection(spec, ActivationFormat::f32));
  auto x = layer_test::random_input(spec, 2, 16);
  x[64 + 3] = std::numeric_limits<float>::infinity();
  std::vector<float> y(x.size());
  std::vector<std::uint16_t> xb(x.size()), yb(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) xb[i] = mxmoe::f32_to_bf16(x[i]);
  const std::int32_t ids[] = {0, 1, 2, 3};
  const float w[] = {0.5f, 0.5f, 0.7f, 0.3f};
  std::int32_t routed_ids[4];
  float routed_w[4];
  const auto names_token_1 = [](const auto& call) {
    try {
      call();
      ADD_FAILURE() << "accepted a non-finite x";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("x: 1 non-finite value (NaN/Inf) in 1 of 2 "
                                                 "tokens: token 1 (1)"));
    }
  };
  names_token_1([&] { layer.forward({.tokens = 2, .x = x.data(), .y = y.data()}); });
  names_token_1([&] {
    layer.forward(
        {.tokens = 2, .x = x.data(), .y = y.data(), .expert_ids = ids, .expert_weights = w});
  });
  names_token_1([&] { layer.forward({.tokens = 2, .x_bf16 = xb.data(), .y_bf16 = yb.data()}); });
  names_token_1([&] {
    layer.forward({.tokens = 2,
                   .x_bf16 = xb.data(),
                   .y_bf16 = yb.data(),
                   .expert_ids = ids,
                   .expert_weights = w});
  });
  names_token_1(
      [&] { mxmoe::MoeLayer::Steps::route(layer, x.data(), nullptr, 2, routed_ids, routed_w); });
  x[64 + 3] = 0.0f;
  const float negative_w[] = {0.5f, 0.5f, -0.7f, 0.3f};
  EXPECT_THROW(layer.forward({.tokens = 2,
                              .x = x.data(),
                              .y = y.data(),
                              .expert_ids = ids,
                              .expert_weights = negative_w}),
               std::invalid_argument);
}

TEST(LayerRuntime, ConstructionChecks) {
  const auto spec = shrink("gpt-oss-20b", 4, 2, 64, 32);
  const auto storage = mxmoe::LayerStorage::random(spec, 17);
  auto none = reference_selection(spec, ActivationFormat::f32);
  none.chosen = "";
  EXPECT_THROW(mxmoe::testing::test_layer(storage.weights(), none), mxmoe::NoBackendError);
  auto unknown = reference_selection(spec, ActivationFormat::f32);
  unknown.chosen = "no_such_backend";
  EXPECT_THROW(mxmoe::testing::test_layer(storage.weights(), unknown), std::invalid_argument);
  auto unresolved = reference_selection(spec, ActivationFormat::f32);
  unresolved.deployment.request.activation.reset();
  EXPECT_THROW(mxmoe::testing::test_layer(storage.weights(), unresolved), std::invalid_argument);
  auto other = shrink("gpt-oss-20b", 4, 2, 96, 32);  // weights of another shape
  EXPECT_THROW(mxmoe::testing::test_layer(storage.weights(),
                                          reference_selection(other, ActivationFormat::f32)),
               std::invalid_argument);
}

TEST(LayerRuntime, MakeLayerSelectsAndRuns) {
  const auto spec = shrink("gpt-oss-20b", 4, 2, 64, 32);
  const auto storage = mxmoe::LayerStorage::random(spec, 19);
  mxmoe::Request request;
  request.forced_backend = "reference";
  request.threads = 1;
  mxmoe::MoeLayer layer = mxmoe::make_layer(spec, storage.weights(), layer_test::test_hardware(),
                                            request, mxmoe::testing::test_runtime(2));
  EXPECT_EQ(layer.selection().chosen, "reference");
  ASSERT_TRUE(layer.selection().deployment.request.activation.has_value());
  const auto x = layer_test::random_input(spec, 3, 20);
  std::vector<float> y(x.size());
  layer.forward({.tokens = 3, .x = x.data(), .y = y.data()});
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
