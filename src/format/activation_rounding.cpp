#include "format/activation_rounding.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "mxmoe/format.hpp"

namespace mxmoe {

std::size_t rounding_scratch_bytes(std::size_t n) noexcept {
  // Block scales (4-byte floats for int8, bytes for mxfp8) first, then one code per element.
  return (n / kMxBlock) * sizeof(float) + n;
}

void round_activations(ActivationFormat f, std::span<const float> in, std::span<float> out,
                       std::byte* scratch) {
  const std::size_t n = in.size();
  const std::size_t blocks = n / kMxBlock;
  switch (f) {
    case ActivationFormat::f32:
      if (out.data() != in.data()) std::copy(in.begin(), in.end(), out.begin());
      return;
    case ActivationFormat::bf16:
      for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(in[i]));
      return;
    case ActivationFormat::int8: {
      std::span<float> d(reinterpret_cast<float*>(scratch), blocks);
      std::span<std::int8_t> q(reinterpret_cast<std::int8_t*>(scratch + blocks * sizeof(float)), n);
      quantize_int8_block32(in, q, d);
      dequantize_int8_block32(q, d, out);
      return;
    }
    case ActivationFormat::mxfp8: {
      std::span<std::uint8_t> scales(reinterpret_cast<std::uint8_t*>(scratch), blocks);
      std::span<std::uint8_t> codes(
          reinterpret_cast<std::uint8_t*>(scratch + blocks * sizeof(float)), n);
      quantize_mxfp8(in, ScaleRule::round_up, codes, scales);
      dequantize_mxfp8(codes, scales, out);
      return;
    }
  }
}

void round_activations_int16_blocks(std::span<const float> in, std::span<float> out) {
  for (std::size_t b = 0; b + kMxBlock <= in.size(); b += kMxBlock) {
    float v[kMxBlock];
    float top = 0;
    bool finite = true;
    for (std::size_t i = 0; i < kMxBlock; ++i) {
      v[i] = bf16_to_f32(f32_to_bf16(in[b + i]));
      finite = finite && std::isfinite(v[i]);
      top = std::max(top, std::fabs(v[i]));
    }
    if (!finite || top == 0) {
      for (std::size_t i = 0; i < kMxBlock; ++i)
        out[b + i] = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const int e = std::ilogb(top);  // floor(log2 M), subnormal M included
    for (std::size_t i = 0; i < kMxBlock; ++i) {
      // In double both scalings are exact; nearbyint rounds to nearest even.
      const double q = std::nearbyint(std::ldexp(static_cast<double>(v[i]), 14 - e));
      out[b + i] = static_cast<float>(std::ldexp(q, e - 14));
    }
  }
}

std::size_t rounding_bf16_scratch_bytes(std::size_t n) noexcept {
  return rounding_scratch_bytes(n) + n * sizeof(float);
}

std::uint16_t mxfp8_value_to_bf16(float v) noexcept {
  if (std::fabs(v) < 0x1p-126f) return std::signbit(v) ? std::uint16_t{0x8000} : std::uint16_t{0};
  return f32_to_bf16(v);  // exact: at most 4 significant bits, a normal exponent (or inf/NaN)
}

void round_activations_bf16(ActivationFormat f, std::span<const float> in,
                            std::span<std::uint16_t> out, std::byte* scratch) {
  const std::size_t n = in.size();
  if (out.size() != n) throw std::invalid_argument("round_activations_bf16: size mismatch");
  switch (f) {
    case ActivationFormat::bf16:
      for (std::size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
      return;
    case ActivationFormat::mxfp8: {
      std::span<float> values(reinterpret_cast<float*>(scratch + rounding_scratch_bytes(n)), n);
      round_activations(f, in, values, scratch);
      for (std::size_t i = 0; i < n; ++i) out[i] = mxfp8_value_to_bf16(values[i]);
      return;
    }
    case ActivationFormat::f32:
    case ActivationFormat::int8:
      break;
  }
  throw std::invalid_argument("round_activations_bf16: " + std::string(to_string(f)) +
                              " activations are not bf16 values");
}

}  // namespace mxmoe
