#include "format/e4m3_blocks.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>

#include "mxmoe/format.hpp"

namespace mxmoe::format {

void quantize_e4m3_blocks(std::span<const float> values, std::int64_t rows, std::int64_t cols,
                          std::int64_t block, std::span<std::uint8_t> codes,
                          std::span<std::uint8_t> scales) {
  if (rows < 0 || cols < 0 || block < 1)
    throw std::invalid_argument("quantize_e4m3_blocks: negative size or block < 1");
  const std::int64_t scale_rows = (rows + block - 1) / block;
  const std::int64_t scale_cols = (cols + block - 1) / block;
  const auto n = static_cast<std::size_t>(rows * cols);
  if (values.size() != n || codes.size() != n ||
      scales.size() != static_cast<std::size_t>(scale_rows * scale_cols))
    throw std::invalid_argument("quantize_e4m3_blocks: span sizes do not match the shape");
  const auto at = [cols](std::int64_t r, std::int64_t c) {
    return static_cast<std::size_t>(r * cols + c);
  };
  for (std::int64_t br = 0; br < scale_rows; ++br) {
    for (std::int64_t bc = 0; bc < scale_cols; ++bc) {
      const std::int64_t r1 = std::min(rows, (br + 1) * block);
      const std::int64_t c1 = std::min(cols, (bc + 1) * block);
      float amax = 0;
      for (std::int64_t r = br * block; r < r1; ++r)
        for (std::int64_t c = bc * block; c < c1; ++c) amax = std::max(amax, std::fabs(values[at(r, c)]));
      int exp2 = 0;  // the smallest 2^k with amax <= 448 * 2^k
      while (std::ldexp(448.0, exp2) < static_cast<double>(amax)) ++exp2;
      while (exp2 > -127 && std::ldexp(448.0, exp2 - 1) >= static_cast<double>(amax)) --exp2;
      scales[static_cast<std::size_t>(br * scale_cols + bc)] = static_cast<std::uint8_t>(127 + exp2);
      for (std::int64_t r = br * block; r < r1; ++r)
        for (std::int64_t c = bc * block; c < c1; ++c)
          codes[at(r, c)] =
              e4m3_encode(static_cast<float>(std::ldexp(static_cast<double>(values[at(r, c)]), -exp2)));
    }
  }
}

}  // namespace mxmoe::format
