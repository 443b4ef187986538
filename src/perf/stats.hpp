// Summary statistics of repeated timings.
#pragma once

#include <span>

namespace mxmoe::perf {

struct Summary {
  double median = 0;
  double sd = 0;   // sample standard deviation (n - 1); 0 for fewer than two samples
  double p10 = 0;  // 10th and 90th percentiles (quantile(samples, 0.1 / 0.9))
  double p90 = 0;
  double min = 0, max = 0;
  int count = 0;
};

// The q-quantile (q in [0, 1]) by linear interpolation between order statistics: with the
// samples sorted x[0] <= ... <= x[n-1], position h = q (n - 1), value x[floor h] +
// (h - floor h)(x[floor h + 1] - x[floor h]) (NumPy's default, Hyndman-Fan type 7). q = 0.5
// is the median. Empty -> 0. Throws std::invalid_argument for q outside [0, 1] or NaN.
double quantile(std::span<const double> samples, double q);

// Median (mean of the two middle values for an even count), sample sd, p10, p90, min and
// max. Empty -> zeros.
Summary summarize(std::span<const double> samples);

}  // namespace mxmoe::perf
