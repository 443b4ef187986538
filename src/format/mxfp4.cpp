// MXFP4 blocks: quantizer (both scale rules), scalar reference decoder, nibble orders.
#include <cstddef>
#include <cstdint>
#include <span>

#include "format/mx_codes.hpp"
#include "format/mx_scale.hpp"
#include "format/mxfp4_dequant_kernels.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe {
namespace {

constexpr int kE2m1Emax = 2;  // 6 = 1.5 * 2^2
constexpr float kE2m1Max = 6.0f;

void quantize_block(const float* x, ScaleRule rule, std::uint8_t* packed, std::uint8_t* scale) {
  const format_detail::BlockScan scan = format_detail::scan_block(x);
  if (!scan.all_finite || scan.amax == 0.0f) {
    // NaN/Inf: the scale NaN marks the whole block NaN. All-zero: scale 2^-127, codes +0.
    *scale = scan.all_finite ? std::uint8_t{0} : kE8m0Nan;
    for (std::size_t j = 0; j < kMxfp4BlockBytes; ++j) packed[j] = 0;
    return;
  }
  const int shared_exp = format_detail::shared_exponent(scan.amax, rule, kE2m1Emax, kE2m1Max);
  // Multiplying by an exact power of two is exactly ldexp: the product is exact unless it
  // falls in the float32 subnormal range, where it is < 2^-126 and encodes to 0 either way.
  const float inv_scale = format_detail::exact_pow2(-shared_exp);
  for (std::size_t j = 0; j < kMxfp4BlockBytes; ++j) {
    const std::uint8_t even = e2m1_encode(x[2 * j] * inv_scale);
    const std::uint8_t odd = e2m1_encode(x[2 * j + 1] * inv_scale);
    packed[j] = static_cast<std::uint8_t>(even | (odd << 4));
  }
  *scale = format_detail::e8m0_code(shared_exp);
}

}  // namespace

namespace format_detail {

void dequantize_mxfp4_rows_portable(const std::uint8_t* packed, const std::uint8_t* scales,
                                    std::size_t blocks, float* out) noexcept {
  for (std::size_t b = 0; b < blocks; ++b) {
    const float scale = e8m0_to_float(scales[b]);
    const std::uint8_t* bytes = packed + b * kMxfp4BlockBytes;
    float* y = out + b * kMxBlock;
    for (std::size_t j = 0; j < kMxfp4BlockBytes; ++j) {
      y[2 * j] = kE2m1Values[bytes[j] & 0x0Fu] * scale;
      y[2 * j + 1] = kE2m1Values[bytes[j] >> 4] * scale;
    }
  }
}

}  // namespace format_detail

void quantize_mxfp4(std::span<const float> x, ScaleRule rule, std::span<std::uint8_t> packed,
                    std::span<std::uint8_t> scales) {
  const std::size_t blocks = x.size() / kMxBlock;
  format_detail::require(x.size() % kMxBlock == 0, "quantize_mxfp4: size not a multiple of 32");
  format_detail::require(packed.size() == blocks * kMxfp4BlockBytes && scales.size() == blocks,
                         "quantize_mxfp4: packed/scales sizes do not match x");
  for (std::size_t b = 0; b < blocks; ++b) {
    quantize_block(x.data() + b * kMxBlock, rule, packed.data() + b * kMxfp4BlockBytes,
                   scales.data() + b);
  }
}

void dequantize_mxfp4(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> scales,
                      std::span<float> out) {
  const std::size_t blocks = scales.size();
  format_detail::require(
      packed.size() == blocks * kMxfp4BlockBytes && out.size() == blocks * kMxBlock,
      "dequantize_mxfp4: packed/out sizes do not match scales");
  format_detail::dequantize_mxfp4_rows_portable(packed.data(), scales.data(), blocks, out.data());
}

// gpt-oss: byte j = element 2j (low) | element 2j+1 (high).
// ggml:    byte j = element j (low)  | element j+16 (high).
void mxfp4_block_to_ggml(const std::uint8_t* gpt_oss_order, std::uint8_t* ggml_order) noexcept {
  std::uint8_t codes[kMxBlock];
  for (std::size_t j = 0; j < kMxfp4BlockBytes; ++j) {
    codes[2 * j] = gpt_oss_order[j] & 0x0Fu;
    codes[2 * j + 1] = static_cast<std::uint8_t>(gpt_oss_order[j] >> 4);
  }
  for (std::size_t j = 0; j < kMxfp4BlockBytes; ++j) {
    ggml_order[j] = static_cast<std::uint8_t>(codes[j] | (codes[j + 16] << 4));
  }
}

void mxfp4_block_from_ggml(const std::uint8_t* ggml_order, std::uint8_t* gpt_oss_order) noexcept {
  std::uint8_t codes[kMxBlock];
  for (std::size_t j = 0; j < kMxfp4BlockBytes; ++j) {
    codes[j] = ggml_order[j] & 0x0Fu;
    codes[j + 16] = static_cast<std::uint8_t>(ggml_order[j] >> 4);
  }
  for (std::size_t j = 0; j < kMxfp4BlockBytes; ++j) {
    gpt_oss_order[j] = static_cast<std::uint8_t>(codes[2 * j] | (codes[2 * j + 1] << 4));
  }
}

}  // namespace mxmoe
