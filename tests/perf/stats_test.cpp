#include "perf/stats.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

namespace mxmoe::perf {
namespace {

TEST(Summarize, HandWorkedOddCount) {
  const std::vector<double> v{5, 1, 3};  // sorted 1 3 5; mean 3; squares 4+0+4 = 8; 8/2 = 4
  const Summary s = summarize(v);
  EXPECT_EQ(s.count, 3);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.sd, 2);
}

TEST(Summarize, HandWorkedEvenCountAveragesTheMiddlePair) {
  const std::vector<double> v{4, 1, 2, 10};  // sorted 1 2 4 10; median (2+4)/2
  const Summary s = summarize(v);
  EXPECT_DOUBLE_EQ(s.median, 3);
  // mean 4.25; squares 10.5625 + 5.0625 + 0.0625 + 33.0625 = 48.75; /3 = 16.25
  EXPECT_DOUBLE_EQ(s.sd, std::sqrt(16.25));
}

TEST(Summarize, OneAndNoSamples) {
  const std::vector<double> one{7.5};
  EXPECT_DOUBLE_EQ(summarize(one).median, 7.5);
  EXPECT_DOUBLE_EQ(summarize(one).sd, 0);
  const Summary none = summarize(std::vector<double>{});
  EXPECT_EQ(none.count, 0);
  EXPECT_DOUBLE_EQ(none.median, 0);
}

TEST(Summarize, RandomSamplesMatchADirectComputation) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(10, 20);
  for (int n : {2, 5, 100, 101}) {
    std::vector<double> v(static_cast<std::size_t>(n));
    for (double& x : v) x = u(rng);
    // Median by counting: the value with as many samples below as above (odd n).
    const Summary s = summarize(v);
    if (n % 2 == 1) {
      int below = 0, above = 0;
      for (double x : v)
        (x < s.median ? below : x > s.median ? above : below) += x == s.median ? 0 : 1;
      EXPECT_EQ(below, above) << n;
    }
    long double mean = 0, sq = 0;
    for (double x : v) mean += x;
    mean /= n;
    for (double x : v) sq += (x - mean) * (x - mean);
    const double sd = static_cast<double>(std::sqrt(sq / (n - 1)));
    // Two-pass sums of <= 101 values of magnitude ~10: relative error ~1e-14.
    EXPECT_NEAR(s.sd, sd, 1e-12 * sd) << n;
  }
}

TEST(Quantile, HandWorked) {
  // sorted 1 2 4 10 (n = 4): q = 0.1 -> h = 0.3 -> 1 + 0.3 x (2 - 1) = 1.3;
  // q = 0.9 -> h = 2.7 -> 4 + 0.7 x (10 - 4) = 8.2; q = 0.5 -> h = 1.5 -> 3 (the median).
  const std::vector<double> v{4, 1, 2, 10};
  EXPECT_DOUBLE_EQ(quantile(v, 0.1), 1.3);
  EXPECT_DOUBLE_EQ(quantile(v, 0.9), 8.2);
  EXPECT_DOUBLE_EQ(quantile(v, 0.5), 3);
  EXPECT_DOUBLE_EQ(quantile(v, 0), 1);
  EXPECT_DOUBLE_EQ(quantile(v, 1), 10);
  const Summary s = summarize(v);
  EXPECT_DOUBLE_EQ(s.p10, 1.3);
  EXPECT_DOUBLE_EQ(s.p90, 8.2);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  // Eleven samples 0..10: h = q x 10 lands on a sample, p10 = 1 and p90 = 9 exactly.
  std::vector<double> eleven;
  for (int i = 10; i >= 0; --i) eleven.push_back(i);
  EXPECT_DOUBLE_EQ(summarize(eleven).p10, 1);
  EXPECT_DOUBLE_EQ(summarize(eleven).p90, 9);
}

TEST(Quantile, OneSampleEmptyAndBadQ) {
  const std::vector<double> one{7.5};
  EXPECT_DOUBLE_EQ(quantile(one, 0.1), 7.5);
  EXPECT_DOUBLE_EQ(summarize(one).p90, 7.5);
  EXPECT_DOUBLE_EQ(quantile(std::vector<double>{}, 0.5), 0);
  EXPECT_THROW(quantile(one, -0.01), std::invalid_argument);
  EXPECT_THROW(quantile(one, 1.5), std::invalid_argument);
  EXPECT_THROW(quantile(one, std::nan("")), std::invalid_argument);
}

// Properties that any interpolating quantile has, checked by counting on random samples
// (with repeated values, as timings at the clock's resolution have): p10 <= median <= p90
// within [min, max]; with h = q (n - 1), at most ceil(h) samples lie strictly below the
// q-quantile and at least floor(h) + 1 lie at or below it; q = 0.5 gives the median.
TEST(Quantile, RandomSamplesObeyTheCountingBounds) {
  std::mt19937_64 rng(7);
  for (int n : {1, 2, 3, 9, 10, 57, 200}) {
    std::uniform_int_distribution<int> u(0, n / 2 + 1);  // many ties
    std::vector<double> v(static_cast<std::size_t>(n));
    for (double& x : v) x = u(rng) * 0.25;
    const Summary s = summarize(v);
    EXPECT_LE(s.min, s.p10) << n;
    EXPECT_LE(s.p10, s.median) << n;
    EXPECT_LE(s.median, s.p90) << n;
    EXPECT_LE(s.p90, s.max) << n;
    EXPECT_DOUBLE_EQ(quantile(v, 0.5), s.median) << n;
    for (double q : {0.0, 0.1, 0.25, 0.9, 1.0}) {
      const double value = quantile(v, q);
      const double h = q * (n - 1);
      int below = 0, at_or_below = 0;
      for (double x : v) {
        below += x < value ? 1 : 0;
        at_or_below += x <= value ? 1 : 0;
      }
      EXPECT_LE(below, static_cast<int>(std::ceil(h))) << n << " q=" << q;
      EXPECT_GE(at_or_below, static_cast<int>(std::floor(h)) + 1) << n << " q=" << q;
    }
  }
}

}  // namespace
}  // namespace mxmoe::perf
