#include "perf/stats.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
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

}  // namespace
}  // namespace mxmoe::perf
