// MXFP8: E4M3 "fn" elements (bias 7, max 448, no Inf, NaN = S.1111.111) with E8M0 scales.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "format/mx_codes.hpp"
#include "format/mx_scale.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe {
namespace {

constexpr int kE4m3Emax = 8;  // 448 = 1.75 * 2^8
constexpr float kE4m3Max = 448.0f;
constexpr std::uint8_t kE4m3MaxCode = 0x7E;
constexpr std::uint8_t kE4m3Nan = 0x7F;
constexpr float kE4m3MinNormal = 0x1p-6f;

void quantize_block(const float* x, ScaleRule rule, std::uint8_t* codes, std::uint8_t* scale) {
  const format_detail::BlockScan scan = format_detail::scan_block(x);
  if (!scan.all_finite || scan.amax == 0.0f) {
    *scale = scan.all_finite ? std::uint8_t{0} : kE8m0Nan;
    for (std::size_t i = 0; i < kMxBlock; ++i) codes[i] = 0;
    return;
  }
  const int shared_exp = format_detail::shared_exponent(scan.amax, rule, kE4m3Emax, kE4m3Max);
  // Exact scaling (see the MXFP4 quantizer): inexact only below 2^-126, which encodes to 0.
  const float inv_scale = format_detail::exact_pow2(-shared_exp);
  for (std::size_t i = 0; i < kMxBlock; ++i) codes[i] = e4m3_encode(x[i] * inv_scale);
  *scale = format_detail::e8m0_code(shared_exp);
}

}  // namespace

float e4m3_decode(std::uint8_t code) noexcept {
  const bool negative = (code & 0x80u) != 0;
  const unsigned exponent = (code >> 3) & 0x0Fu;
  const unsigned mantissa = code & 0x07u;
  float magnitude = 0.0f;
  if (exponent == 0x0Fu && mantissa == 0x07u) {
    magnitude = std::bit_cast<float>(std::uint32_t{0x7FC00000u});
  } else if (exponent == 0) {
    magnitude = static_cast<float>(mantissa) * 0x1p-9f;  // subnormals: steps of 2^-9
  } else {
    // Normal: re-bias the exponent (7 -> 127) and widen the mantissa (3 -> 23 bits).
    magnitude = std::bit_cast<float>(((exponent + 120u) << 23) | (mantissa << 20));
  }
  return negative ? -magnitude : magnitude;
}

std::uint8_t e4m3_encode(float v) noexcept {
  if (std::isnan(v)) return kE4m3Nan;
  const std::uint8_t sign = std::signbit(v) ? 0x80u : 0x00u;
  const float a = std::fabs(v);
  std::uint32_t magnitude = 0;
  if (a < kE4m3MinNormal) {
    // Subnormal range: the code is the count of 2^-9 steps (a * 2^9 is exact). A result of 8
    // is the code of 2^-6, the smallest normal, so the carry needs no special case.
    magnitude = static_cast<std::uint32_t>(std::nearbyint(a * 0x1p9f));
  } else if (a >= kE4m3Max) {
    magnitude = kE4m3MaxCode;  // saturate, Inf included
  } else {
    // Round the 23-bit mantissa to 3 bits, ties to even; a carry moves into the exponent.
    std::uint32_t bits = std::bit_cast<std::uint32_t>(a);
    bits += 0x7FFFFu + ((bits >> 20) & 1u);
    const std::uint32_t exponent = (bits >> 23) - 120u;  // re-bias 127 -> 7
    magnitude = std::min((exponent << 3) | ((bits >> 20) & 0x7u), std::uint32_t{kE4m3MaxCode});
  }
  return static_cast<std::uint8_t>(sign | magnitude);
}

void quantize_mxfp8(std::span<const float> x, ScaleRule rule, std::span<std::uint8_t> codes,
                    std::span<std::uint8_t> scales) {
  const std::size_t blocks = x.size() / kMxBlock;
  format_detail::require(x.size() % kMxBlock == 0, "quantize_mxfp8: size not a multiple of 32");
  format_detail::require(codes.size() == x.size() && scales.size() == blocks,
                         "quantize_mxfp8: codes/scales sizes do not match x");
  for (std::size_t b = 0; b < blocks; ++b) {
    quantize_block(x.data() + b * kMxBlock, rule, codes.data() + b * kMxBlock, scales.data() + b);
  }
}

void dequantize_mxfp8(std::span<const std::uint8_t> codes, std::span<const std::uint8_t> scales,
                      std::span<float> out) {
  const std::size_t blocks = scales.size();
  format_detail::require(codes.size() == blocks * kMxBlock && out.size() == codes.size(),
                         "dequantize_mxfp8: codes/out sizes do not match scales");
  for (std::size_t b = 0; b < blocks; ++b) {
    const float scale = format_detail::e8m0_to_float(scales[b]);
    for (std::size_t i = b * kMxBlock; i < (b + 1) * kMxBlock; ++i) {
      out[i] = e4m3_decode(codes[i]) * scale;
    }
  }
}

}  // namespace mxmoe
