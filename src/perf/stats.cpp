#include "perf/stats.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mxmoe::perf {

Summary summarize(std::span<const double> samples) {
  Summary s;
  s.count = static_cast<int>(samples.size());
  if (samples.empty()) return s;
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  s.median = n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
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
