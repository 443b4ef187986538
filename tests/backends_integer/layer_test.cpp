// The int8 backends (avx512_vnni, amx_int8, avx2_int8, avx_vnni_int8) on whole expert batches:
// against the reference backend (same int8 semantics, double accumulation) and a float64 evaluation
// written in the test, on random layers with tails (H = 96, I = 160), 1..300 tokens, zero-token
// experts, one expert taking every token, tiny E8M0 scales; identical bits across threads, paths
// and batches.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <vector>

#include "backends/registry.hpp"
#include "hw/amx_permission.hpp"
#include "int8_test_support.hpp"
#include "mxfp4_copy.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe::int8_test {
namespace {

bool has_vnni() {
  static const IsaFeatures isa = probe_hardware().isa;
  return isa.avx512f && isa.avx512bw && isa.avx512vl && isa.avx512dq && isa.avx512_vnni;
}
bool has_avx2() {
  static const IsaFeatures isa = probe_hardware().isa;
  return isa.avx2 && isa.fma && isa.f16c;
}
bool has_amx() {
  static const bool ok =
      has_vnni() && probe_hardware().isa.amx_int8 && hw::request_amx_tile_permission().empty();
  return ok;
}

// The backends this machine can run.
std::vector<const Backend*> runnable() {
  std::vector<const Backend*> list;
  if (has_vnni()) list.push_back(find_backend("avx512_vnni"));
  if (has_amx()) list.push_back(find_backend("amx_int8"));
  if (has_avx2()) list.push_back(find_backend("avx2_int8"));
  if (has_avx2() && probe_hardware().isa.avx_vnni) list.push_back(find_backend("avx_vnni_int8"));
  return list;
}

std::vector<float> slots_of(const std::vector<float>& out, std::int64_t token, int top_k,
                            int hidden) {
  const auto begin = out.begin() + token * top_k * hidden;
  return {begin, begin + top_k * hidden};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Tolerances. Against the reference backend both sides quantize x identically; the GEMM sums
// differ by float32 rounding (float per-block FMAs here, double there): measured ~1e-7
// relative L2 on these layers. One a_q step moved by such a rounding (a * (1/d) within an ulp
// of a tie) would add ~1e-5 on these small shapes, so 1e-5 (the project's conformance bar)
// also catches a wrong block order, scale or layout, which give errors >= 1e-3.
constexpr double kVsReference = 1e-5;
constexpr double kVsFloat64 = 1e-5;

struct Case {
  ActivationFn fn;
  GateUpLayout layout;
  bool bias;
  std::int64_t tokens;
};

TEST(Int8Backends, MatchReferenceBackendAndFloat64) {
  const auto backends = runnable();
  if (backends.empty()) GTEST_SKIP() << "no int8 backend runs here (no AVX2)";
  const Case cases[] = {
      {ActivationFn::swiglu_oai, GateUpLayout::interleaved, true, 1},
      {ActivationFn::swiglu_oai, GateUpLayout::interleaved, true, 40},
      {ActivationFn::silu_glu, GateUpLayout::halves, false, 17},
      {ActivationFn::silu_glu_clamp, GateUpLayout::halves, true, 33},
  };
  ThreadPool pool(2);
  std::mt19937 rng(21);
  for (const Case& c : cases) {
    const LayerSpec spec = small_spec(c.fn, c.layout, c.bias);
    const LayerStorage storage = LayerStorage::random(spec, 5);
    const Deployment d = int8_deployment(spec);
    const Routing routing = random_routing(c.tokens, spec.top_k, spec.num_experts - 1, rng);
    const auto x = random_input(c.tokens, spec.hidden, rng);
    const auto reference = run_kernel(*find_backend("reference")->create(d, storage.weights()),
                                      spec, x, routing, pool);
    const auto exact = evaluate_f64(spec, storage.weights(), x, routing);
    for (const Backend* b : backends) {
      SCOPED_TRACE(std::string(b->name()) + " fn " + std::string(to_string(c.fn)) + " tokens " +
                   std::to_string(c.tokens));
      ASSERT_TRUE(b->check(d).empty());
      const auto got = run_kernel(*b->create(d, storage.weights()), spec, x, routing, pool);
      EXPECT_LE(relative_l2(got, to_double(reference)), kVsReference);
      EXPECT_LE(relative_l2(got, exact), kVsFloat64);
    }
  }
}

TEST(Int8Backends, ManyTokensOnOneExpertAndEmptyExperts) {
  const auto backends = runnable();
  if (backends.empty()) GTEST_SKIP() << "no int8 backend runs here (no AVX2)";
  const LayerSpec spec = small_spec();
  const LayerStorage storage = LayerStorage::random(spec, 9);
  const Deployment d = int8_deployment(spec);
  std::mt19937 rng(3);
  // 300 tokens all on experts 0..2 (expert 0 takes every token), experts 3..5 get none.
  const Routing routing = random_routing(300, spec.top_k, spec.top_k, rng);
  const auto x = random_input(300, spec.hidden, rng);
  ThreadPool pool(2);
  const auto reference =
      run_kernel(*find_backend("reference")->create(d, storage.weights()), spec, x, routing, pool);
  for (const Backend* b : backends) {
    SCOPED_TRACE(b->name());
    const auto got = run_kernel(*b->create(d, storage.weights()), spec, x, routing, pool);
    EXPECT_LE(relative_l2(got, to_double(reference)), kVsReference);
  }
}

TEST(Int8Backends, TinyScaleCodesAreNotFlushed) {
  const auto backends = runnable();
  if (backends.empty()) GTEST_SKIP() << "no int8 backend runs here (no AVX2)";
  const LayerSpec spec = small_spec();
  const LayerStorage storage = LayerStorage::random(spec, 17);
  LayerWeights w = storage.weights();
  // Copies of W1/W2 scales where one block in 8 has an E8M0 code 0..3 (2^-127 .. 2^-124:
  // subnormal weights), and W1 rows of expert 1 have ALL scales at 103..106 so their h is
  // small (~2^-22) but normal: a flushed or mis-built 2^(e-128) would change them.
  testing::Mxfp4Copy c1(w.w1), c2(w.w2);
  std::vector<std::uint8_t>& s1 = c1.scales;
  std::vector<std::uint8_t>& s2 = c2.scales;
  std::mt19937 rng(4);
  for (std::size_t i = 0; i < s1.size(); i += 8) s1[i] = static_cast<std::uint8_t>(rng() % 4);
  for (std::size_t i = 3; i < s2.size(); i += 8) s2[i] = static_cast<std::uint8_t>(rng() % 4);
  const std::size_t per_expert = static_cast<std::size_t>(w.w1.rows * w.w1.row_scales());
  for (std::size_t i = per_expert; i < 2 * per_expert; ++i)
    s1[i] = static_cast<std::uint8_t>(103 + rng() % 4);
  w.w1 = c1.view();
  w.w2 = c2.view();
  const Deployment d = int8_deployment(spec);
  const Routing routing = random_routing(20, spec.top_k, spec.num_experts, rng);
  const auto x = random_input(20, spec.hidden, rng);
  ThreadPool pool(1);
  const auto exact = evaluate_f64(spec, w, x, routing);
  for (const Backend* b : backends) {
    SCOPED_TRACE(b->name());
    const auto got = run_kernel(*b->create(d, w), spec, x, routing, pool);
    EXPECT_LE(relative_l2(got, exact), kVsFloat64);
  }
}

TEST(Int8Backends, OneAndTwoThreadsGiveIdenticalBits) {
  const auto backends = runnable();
  if (backends.empty()) GTEST_SKIP() << "no int8 backend runs here (no AVX2)";
  const LayerSpec spec = small_spec();
  const LayerStorage storage = LayerStorage::random(spec, 2);
  const Deployment d = int8_deployment(spec);
  std::mt19937 rng(8);
  const Routing routing = random_routing(70, spec.top_k, spec.num_experts, rng);
  const auto x = random_input(70, spec.hidden, rng);
  ThreadPool one(1), two(2);
  for (const Backend* b : backends) {
    SCOPED_TRACE(b->name());
    const auto kernel = b->create(d, storage.weights());
    EXPECT_TRUE(same_bits(run_kernel(*kernel, spec, x, routing, one),
                          run_kernel(*kernel, spec, x, routing, two)));
  }
}

// The decode path (VNNI, < 16 slots per expert) and the tile path (AMX chunks of 16) are one
// numerics class: amx_int8 and avx512_vnni agree bit for bit on a batch that uses both.
TEST(Int8Backends, AmxAndVnniPathsGiveIdenticalBits) {
  if (!has_amx()) GTEST_SKIP() << "no AMX int8 (or the OS refused the tile permission)";
  const LayerSpec spec = small_spec(ActivationFn::swiglu_oai, GateUpLayout::halves, true);
  const LayerStorage storage = LayerStorage::random(spec, 12);
  const Deployment d = int8_deployment(spec);
  std::mt19937 rng(10);
  const Routing routing = random_routing(150, spec.top_k, spec.num_experts, rng);
  const auto x = random_input(150, spec.hidden, rng);
  ThreadPool pool(2);
  const auto vnni = run_kernel(*find_backend("avx512_vnni")->create(d, storage.weights()), spec, x,
                               routing, pool);
  const auto amx =
      run_kernel(*find_backend("amx_int8")->create(d, storage.weights()), spec, x, routing, pool);
  EXPECT_TRUE(same_bits(vnni, amx));
}

// One numerics class across instruction sets: the ymm backends give avx512_vnni's bits on
// batches that use every token tile (1..4 slots per expert and many), with tiny scale codes,
// every nonlinearity and layout, and hostile inputs (a token with an Inf, one with huge and
// one with subnormal values).
TEST(Int8Backends, YmmBackendsGiveTheAvx512VnniBits) {
  if (!has_vnni() || !has_avx2()) GTEST_SKIP() << "needs AVX-512 VNNI and AVX2 to compare";
  std::vector<const Backend*> ymm = {find_backend("avx2_int8")};
  if (probe_hardware().isa.avx_vnni) ymm.push_back(find_backend("avx_vnni_int8"));
  const Case cases[] = {
      {ActivationFn::swiglu_oai, GateUpLayout::interleaved, true, 1},
      {ActivationFn::swiglu_oai, GateUpLayout::interleaved, true, 5},
      {ActivationFn::silu_glu, GateUpLayout::halves, false, 23},
      {ActivationFn::silu_glu_clamp, GateUpLayout::halves, true, 300},
  };
  ThreadPool pool(2);
  std::mt19937 rng(31);
  for (const Case& c : cases) {
    const LayerSpec spec = small_spec(c.fn, c.layout, c.bias);
    const LayerStorage storage = LayerStorage::random(spec, 41);
    LayerWeights w = storage.weights();
    mxmoe::testing::Mxfp4Copy w1(w.w1);
    for (std::size_t i = 0; i < w1.scales.size(); i += 7)
      w1.scales[i] = static_cast<std::uint8_t>(rng() % 4);
    w.w1 = w1.view();
    const Deployment d = int8_deployment(spec);
    const Routing routing = random_routing(c.tokens, spec.top_k, spec.num_experts, rng);
    auto x = random_input(c.tokens, spec.hidden, rng);
    if (c.tokens >= 5) {
      x[3] = INFINITY;
      for (int i = 0; i < spec.hidden; ++i) {
        x[static_cast<std::size_t>(spec.hidden + i)] *= 1e30f;
        x[static_cast<std::size_t>(2 * spec.hidden + i)] *= 1e-40f;
      }
    }
    const auto want =
        run_kernel(*find_backend("avx512_vnni")->create(d, w), spec, x, routing, pool);
    for (const Backend* b : ymm) {
      SCOPED_TRACE(std::string(b->name()) + " tokens " + std::to_string(c.tokens));
      EXPECT_TRUE(same_bits(run_kernel(*b->create(d, w), spec, x, routing, pool), want));
    }
  }
}

// A token's slot outputs are the same bits alone and inside batches of several sizes, at any
// position, with random neighbours (a quick version of the invariance suite).
TEST(Int8Backends, TokenAloneEqualsTokenInBatch) {
  const auto backends = runnable();
  if (backends.empty()) GTEST_SKIP() << "no int8 backend runs here (no AVX2)";
  const LayerSpec spec = small_spec();
  const LayerStorage storage = LayerStorage::random(spec, 6);
  const Deployment d = int8_deployment(spec);
  std::mt19937 rng(14);
  const Routing probe = random_routing(1, spec.top_k, spec.num_experts, rng);
  const auto probe_x = random_input(1, spec.hidden, rng);
  ThreadPool pool(2);
  for (const Backend* b : backends) {
    SCOPED_TRACE(b->name());
    const auto kernel = b->create(d, storage.weights());
    const auto alone = run_kernel(*kernel, spec, probe_x, probe, pool);
    for (const std::int64_t batch : {2, 7, 40, 97}) {
      Routing r = random_routing(batch, spec.top_k, spec.num_experts, rng);
      auto x = random_input(batch, spec.hidden, rng);
      const std::int64_t at = static_cast<std::int64_t>(rng() % static_cast<unsigned>(batch));
      std::copy(probe.experts.begin(), probe.experts.end(), r.experts.begin() + at * spec.top_k);
      std::copy(probe_x.begin(), probe_x.end(), x.begin() + at * spec.hidden);
      const auto out = run_kernel(*kernel, spec, x, r, pool);
      EXPECT_TRUE(same_bits(slots_of(out, at, spec.top_k, spec.hidden), alone))
          << "batch " << batch << " position " << at;
    }
  }
}

}  // namespace
}  // namespace mxmoe::int8_test
