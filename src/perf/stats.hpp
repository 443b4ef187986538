// Summary statistics of repeated timings.
#pragma once

#include <span>

namespace mxmoe::perf {

struct Summary {
  double median = 0;
  double sd = 0;  // sample standard deviation (n - 1); 0 for fewer than two samples
  int count = 0;
};

// Median (mean of the two middle values for an even count) and sample sd. Empty -> zeros.
Summary summarize(std::span<const double> samples);

}  // namespace mxmoe::perf
