// Symmetric int8 per 32-element block, the integer activation format of the int8 backends.
// The arithmetic below IS the definition (see format.hpp and docs/FORMATS.md): float32
// d = amax / 127, inv = 1 / d (0 for d = 0), q = nearbyint(x * inv) under the default
// rounding mode (ties to even), clamped to [-127, 127]. Non-finite input is not hidden:
// a NaN in the block makes d NaN, an Inf makes d Inf; elements whose x * inv is NaN get
// q = 0, so such a block dequantizes to NaN everywhere.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "format/mx_scale.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe {
namespace {

constexpr float kInt8Max = 127.0f;

float block_amax(const float* x) noexcept {
  float amax = 0.0f;
  bool has_nan = false;
  for (std::size_t i = 0; i < kMxBlock; ++i) {
    has_nan = has_nan || std::isnan(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  return has_nan ? std::numeric_limits<float>::quiet_NaN() : amax;
}

}  // namespace

void quantize_int8_block32(std::span<const float> x, std::span<std::int8_t> q, std::span<float> d) {
  const std::size_t blocks = x.size() / kMxBlock;
  format_detail::require(x.size() % kMxBlock == 0,
                         "quantize_int8_block32: size not a multiple of 32");
  format_detail::require(q.size() == x.size() && d.size() == blocks,
                         "quantize_int8_block32: q/d sizes do not match x");
  for (std::size_t b = 0; b < blocks; ++b) {
    const float* xb = x.data() + b * kMxBlock;
    const float scale = block_amax(xb) / kInt8Max;
    const float inv_scale = scale != 0.0f ? 1.0f / scale : 0.0f;
    d[b] = scale;
    for (std::size_t i = 0; i < kMxBlock; ++i) {
      const float rounded = std::nearbyint(xb[i] * inv_scale);
      const float clamped = std::isnan(rounded) ? 0.0f : std::clamp(rounded, -kInt8Max, kInt8Max);
      q[b * kMxBlock + i] = static_cast<std::int8_t>(clamped);
    }
  }
}

void dequantize_int8_block32(std::span<const std::int8_t> q, std::span<const float> d,
                             std::span<float> out) {
  const std::size_t blocks = d.size();
  format_detail::require(q.size() == blocks * kMxBlock && out.size() == q.size(),
                         "dequantize_int8_block32: q/out sizes do not match d");
  for (std::size_t b = 0; b < blocks; ++b) {
    for (std::size_t i = b * kMxBlock; i < (b + 1) * kMxBlock; ++i) {
      out[i] = d[b] * static_cast<float>(q[i]);
    }
  }
}

}  // namespace mxmoe
