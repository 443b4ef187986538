// The dot product of the reference paths: float inputs, double accumulation in 8 fixed
// lanes (element i goes to lane i % 8), lanes summed in a fixed tree. The order depends
// only on n, never on threads or the batch. Double makes the reference exact enough that
// its own rounding (~1e-16 relative) is negligible next to any float32 backend's; the 8
// lanes are independent dependency chains the compiler can schedule (and vectorize)
// without reassociating anything.
#pragma once

#include <cstddef>

namespace mxmoe {

inline double dot_f64(const float* a, const float* b, std::size_t n) noexcept {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (std::size_t j = 0; j < 8; ++j)
      lane[j] += static_cast<double>(a[i + j]) * static_cast<double>(b[i + j]);
  for (std::size_t j = 0; i < n; ++i, ++j)
    lane[j] += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

}  // namespace mxmoe
