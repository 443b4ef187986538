// The router's logits computed over (token, block of experts) on a pool: the same bits as on
// one thread for every pool size, within one float ulp of a long-double reference, and the
// same selection (ids, their order, the weights) when routed, ties included.
#include "routing/router_logits.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "base/thread_pool.hpp"
#include "routing/routing.hpp"

namespace mxmoe {
namespace {

struct Problem {
  int experts, hidden;
  std::int64_t tokens;
  std::vector<float> weight, bias, x;
};

// Random router; experts 1 and 2 share one row, and 5 is 4's row (ties of the logits), so the
// selection must break them toward the lower index whatever thread computed them.
Problem make_problem(int experts, int hidden, std::int64_t tokens, std::uint64_t seed) {
  Problem p{experts, hidden, tokens, {}, {}, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  p.weight.resize(static_cast<std::size_t>(experts) * static_cast<std::size_t>(hidden));
  for (float& v : p.weight) v = normal(rng);
  const auto row = [&](int e) { return p.weight.begin() + std::ptrdiff_t{e} * hidden; };
  if (experts > 2) std::copy(row(1), row(2), row(2));
  if (experts > 5) std::copy(row(4), row(5), row(5));
  p.bias.assign(static_cast<std::size_t>(experts), 0.0f);  // equal biases keep the ties
  for (int e = 6; e < experts; ++e) p.bias[static_cast<std::size_t>(e)] = normal(rng);
  p.x.resize(static_cast<std::size_t>(tokens) * static_cast<std::size_t>(hidden));
  for (float& v : p.x) v = normal(rng);
  return p;
}

std::vector<float> logits_of(const Problem& p, ThreadPool* pool) {
  std::vector<float> out(static_cast<std::size_t>(p.tokens * p.experts), std::nanf(""));
  compute_router_logits(p.weight.data(), p.bias.data(), p.x.data(), p.tokens, p.experts, p.hidden,
                        out.data(), pool);
  return out;
}

TEST(RouterLogits, SerialMatchesALongDoubleReference) {
  const Problem p = make_problem(13, 37, 3, 1);
  const std::vector<float> got = logits_of(p, nullptr);
  for (std::int64_t t = 0; t < p.tokens; ++t)
    for (int e = 0; e < p.experts; ++e) {
      long double ref = p.bias[static_cast<std::size_t>(e)];
      for (int h = 0; h < p.hidden; ++h)
        ref += static_cast<long double>(p.weight[static_cast<std::size_t>(e * p.hidden + h)]) *
               p.x[static_cast<std::size_t>(t * p.hidden + h)];
      const auto want = static_cast<float>(ref);
      const float g = got[static_cast<std::size_t>(t * p.experts + e)];
      // The double sum errs by ~H x 2^-53 relative, far below a float ulp; rounding it to
      // float can land one ulp away from rounding the long double only at a half-ulp tie.
      EXPECT_LE(std::fabs(g - want), std::fabs(std::nextafter(want, INFINITY) - want))
          << t << " " << e;
    }
}

TEST(RouterLogits, SameBitsOnEveryPoolSize) {
  for (const auto& [experts, hidden, tokens] :
       {std::tuple{32, 2880, std::int64_t{1}}, std::tuple{70, 96, std::int64_t{5}},
        std::tuple{7, 40, std::int64_t{1}}, std::tuple{256, 64, std::int64_t{17}}}) {
    const Problem p = make_problem(experts, hidden, tokens, 7u + static_cast<unsigned>(experts));
    const std::vector<float> serial = logits_of(p, nullptr);
    for (int threads : {1, 2, 3, 4}) {
      ThreadPool pool(threads);
      const std::vector<float> parallel = logits_of(p, &pool);
      EXPECT_EQ(std::memcmp(parallel.data(), serial.data(), serial.size() * sizeof(float)), 0)
          << experts << " experts, " << tokens << " tokens, " << threads << " threads";
      // The layer's call: the work threshold picks serial or parallel, same bits either way.
      std::vector<float> chosen(serial.size());
      compute_router_logits(p.weight.data(), p.bias.data(), p.x.data(), p.tokens, p.experts,
                            p.hidden, chosen.data(), &pool);
      EXPECT_EQ(std::memcmp(chosen.data(), serial.data(), serial.size() * sizeof(float)), 0);
    }
  }
}

TEST(RouterLogits, SameSelectionAndOrderWithTies) {
  for (RoutingMethod method : {RoutingMethod::topk_softmax, RoutingMethod::softmax_topk}) {
    LayerSpec spec;
    spec.num_experts = 32;
    spec.top_k = 6;
    spec.hidden = 64;
    spec.intermediate = 64;
    spec.routing = method;
    const Problem p = make_problem(spec.num_experts, spec.hidden, 64, 99);
    const std::vector<float> serial = logits_of(p, nullptr);
    ThreadPool pool(3);
    const std::vector<float> parallel = logits_of(p, &pool);
    const auto route = [&](const std::vector<float>& logits, std::vector<std::int32_t>& ids,
                           std::vector<float>& weights) {
      ids.assign(static_cast<std::size_t>(p.tokens * spec.top_k), -1);
      weights.assign(ids.size(), std::nanf(""));
      std::vector<float> scratch(routing_scratch_floats(spec));
      route_logits(spec, logits.data(), nullptr, p.tokens, ids.data(), weights.data(), scratch);
    };
    std::vector<std::int32_t> ids_s, ids_p;
    std::vector<float> w_s, w_p;
    route(serial, ids_s, w_s);
    route(parallel, ids_p, w_p);
    EXPECT_EQ(ids_p, ids_s);
    EXPECT_EQ(std::memcmp(w_p.data(), w_s.data(), w_s.size() * sizeof(float)), 0);
    // The ties are real and broken toward the lower index: whenever both of a tied pair are
    // chosen, the lower one comes first.
    int tied_pairs_chosen = 0;
    for (std::int64_t t = 0; t < p.tokens; ++t) {
      const float* row = parallel.data() + t * spec.num_experts;
      ASSERT_EQ(std::memcmp(&row[1], &row[2], sizeof(float)), 0);
      ASSERT_EQ(std::memcmp(&row[4], &row[5], sizeof(float)), 0);
      const auto begin = ids_p.begin() + t * spec.top_k, end = begin + spec.top_k;
      for (const auto& [lo, hi] : {std::pair{1, 2}, std::pair{4, 5}}) {
        const auto a = std::find(begin, end, lo), b = std::find(begin, end, hi);
        if (a != end && b != end) {
          ++tied_pairs_chosen;
          EXPECT_LT(a - begin, b - begin) << t;
        }
        if (b != end) {
          EXPECT_NE(a, end) << "token " << t << " chose " << hi << " without its twin " << lo;
        }
      }
    }
    EXPECT_GT(tied_pairs_chosen, 0);  // 64 tokens, 6 of 32: some token picks a tied pair
  }
}

}  // namespace
}  // namespace mxmoe
