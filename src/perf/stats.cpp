#include "perf/stats.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace mxmoe::perf {

namespace {

// quantile() on samples already sorted ascending.
double sorted_quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double h = q * static_cast<double>(sorted.size() - 1);
  const double below = std::floor(h);
  const auto i = static_cast<std::size_t>(below);
  if (i + 1 >= sorted.size()) return sorted.back();
  return sorted[i] + (h - below) * (sorted[i + 1] - sorted[i]);
}

}  // namespace

double quantile(std::span<const double> samples, double q) {
  if (!(q >= 0 && q <= 1)) throw std::invalid_argument("quantile: q must lie in [0, 1]");
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted_quantile(sorted, q);
}

Summary summarize(std::span<const double> samples) {
  Summary s;
  s.count = static_cast<int>(samples.size());
  if (samples.empty()) return s;
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  s.median = n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  s.p10 = sorted_quantile(sorted, 0.1);
  s.p90 = sorted_quantile(sorted, 0.9);
  s.min = sorted.front();
  s.max = sorted.back();
  if (n >= 2) {
    double mean = 0;
    for (double v : sorted) mean += v;
    mean /= static_cast<double>(n);
    double squares = 0;
    for (double v : sorted) squares += (v - mean) * (v - mean);
    s.sd = std::sqrt(squares / static_cast<double>(n - 1));
  }
  return s;
}

}  // namespace mxmoe::perf
