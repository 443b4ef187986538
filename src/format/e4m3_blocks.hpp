// FP8 E4M3 matrices with one power-of-two (E8M0) scale per square block, the layout of
// DeepSeek-V4's shared experts (128 x 128 blocks): what a generated layer of that kind holds.
#pragma once

#include <cstdint>
#include <span>

namespace mxmoe::format {

// values [rows, cols] row-major -> codes [rows, cols] E4M3 and scales
// [ceil(rows / block), ceil(cols / block)] E8M0. Each block's scale is the smallest 2^k with
// amax <= 448 * 2^k (k >= -127), and each element is e4m3_encode(v * 2^-k) (RNE, saturating).
// Throws std::invalid_argument when a span's size does not match.
void quantize_e4m3_blocks(std::span<const float> values, std::int64_t rows, std::int64_t cols,
                          std::int64_t block, std::span<std::uint8_t> codes,
                          std::span<std::uint8_t> scales);

}  // namespace mxmoe::format
