// Number formats of mxmoe: E2M1 / E8M0 (MXFP4), E4M3 / E8M0 (MXFP8), BF16, and the
// symmetric int8-per-32 activation format. Pure functions, no state; the single source of
// truth for every quantizer in the project (backends reuse these definitions so that their
// quantized inputs are bit-identical to the reference backend's).
//
// Layout facts (see docs/FORMATS.md):
//  - An MX block is 32 elements sharing one E8M0 scale byte (value 2^(code-127); 0xFF = NaN).
//  - MXFP4 packed bytes use the gpt-oss nibble order: byte j of a 16-byte block holds
//    element 2j in the low nibble and 2j+1 in the high nibble. ggml's order (element j low,
//    j+16 high) is converted with mxfp4_block_{to,from}_ggml.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "mxmoe/export.h"

namespace mxmoe {

inline constexpr std::size_t kMxBlock = 32;          // elements per MX block
inline constexpr std::size_t kMxfp4BlockBytes = 16;  // packed E2M1 bytes per block
inline constexpr std::uint8_t kE8m0Nan = 0xFF;

// The format both GEMM inputs (x and the expert's intermediate activation) are rounded to,
// per token. Every format here is per-token (per 32-element block at most), so none
// depends on other tokens of the batch.
enum class ActivationFormat : std::uint8_t {
  f32,    // no rounding
  bf16,   // round to nearest even bf16
  int8,   // symmetric int8 per 32-element block, float32 scale per block
  mxfp8,  // E4M3 elements, E8M0 scale per 32 (round-up scale rule: never clips)
};
MXMOE_API std::string_view to_string(ActivationFormat) noexcept;
MXMOE_API ActivationFormat parse_activation_format(std::string_view);  // throws, listing valid keys
MXMOE_API std::vector<ActivationFormat> all_activation_formats();

// How a block's shared exponent is chosen from its largest magnitude amax.
enum class ScaleRule : std::uint8_t {
  floor,     // OCP: floor(log2(amax)) - emax_elem; may clip values in (max*2^k, 2*max*2^k)
  round_up,  // ceil(log2(amax / max_elem)); never clips (triton_kernels / HF default)
};

// ---- E2M1 -------------------------------------------------------------------------------
// Value of a 4-bit E2M1 code (only the low nibble is read). 0x8 decodes to -0.0f.
MXMOE_API float e2m1_decode(std::uint8_t code) noexcept;
// Nearest E2M1 code to v (ties to even mantissa), saturating at +-6; keeps the sign of zero.
// NaN maps to +0 — callers that must preserve NaN check first (the MXFP4 quantizer does).
MXMOE_API std::uint8_t e2m1_encode(float v) noexcept;

// ---- E8M0 -------------------------------------------------------------------------------
// 2^(code-127) for code 0..254 (code 0 is the float32 subnormal 2^-127); NaN for 0xFF.
MXMOE_API float e8m0_decode(std::uint8_t code) noexcept;

// ---- MXFP4 ------------------------------------------------------------------------------
// Quantizes n floats (n % 32 == 0) into n/2 packed bytes and n/32 scale bytes.
// All-zero block: scale 0, codes +0. A NaN or Inf anywhere in a block: scale 0xFF (the
// whole block decodes to NaN), never a silent finite value.
MXMOE_API void quantize_mxfp4(std::span<const float> x, ScaleRule rule,
                              std::span<std::uint8_t> packed, std::span<std::uint8_t> scales);
// Dequantizes n = scales.size()*32 elements (scalar reference decoder).
MXMOE_API void dequantize_mxfp4(std::span<const std::uint8_t> packed,
                                std::span<const std::uint8_t> scales, std::span<float> out);
// The MXFP4 decoders of dequantize_mxfp4_fast; every one gives dequantize_mxfp4's bits.
enum class Mxfp4Decoder : std::uint8_t {
  portable,  // any CPU
  avx2,      // x86-64 AVX2 + FMA
  avx512,    // x86-64 AVX-512 F
};
// Same result bit for bit as dequantize_mxfp4, with `decoder`: pick it from the probed and
// capped Hardware with fastest_mxfp4_decoder (hardware.hpp), so MXMOE_MAX_ISA holds here as
// for the backends. Throws std::invalid_argument for a decoder this build or this CPU lacks
// (never an illegal instruction).
MXMOE_API void dequantize_mxfp4_fast(std::span<const std::uint8_t> packed,
                                     std::span<const std::uint8_t> scales, std::span<float> out,
                                     Mxfp4Decoder decoder);
// Nibble-order permutations of one 16-byte block (inverse of each other).
MXMOE_API void mxfp4_block_to_ggml(const std::uint8_t* gpt_oss_order,
                                   std::uint8_t* ggml_order) noexcept;
MXMOE_API void mxfp4_block_from_ggml(const std::uint8_t* ggml_order,
                                     std::uint8_t* gpt_oss_order) noexcept;

// ---- MXFP8 (E4M3 "fn") --------------------------------------------------------------------
MXMOE_API float e4m3_decode(std::uint8_t code) noexcept;  // 0x7F / 0xFF are NaN
MXMOE_API std::uint8_t e4m3_encode(float v) noexcept;     // RNE, saturating at +-448, NaN -> 0x7F
MXMOE_API void quantize_mxfp8(std::span<const float> x, ScaleRule rule,
                              std::span<std::uint8_t> codes, std::span<std::uint8_t> scales);
MXMOE_API void dequantize_mxfp8(std::span<const std::uint8_t> codes,
                                std::span<const std::uint8_t> scales, std::span<float> out);

// ---- BF16 -------------------------------------------------------------------------------
MXMOE_API std::uint16_t f32_to_bf16(
    float v) noexcept;  // round to nearest even; NaN stays NaN (quiet)
MXMOE_API float bf16_to_f32(std::uint16_t v) noexcept;

// ---- int8 per 32-element block (activations) ----------------------------------------------
// d = amax/127 per block; q = round_to_nearest_even(x * (1/d)) clamped to [-127, 127];
// an all-zero block has d = 0 and q = 0. Exactly this arithmetic is the definition: every
// backend that quantizes to int8 produces these bits.
MXMOE_API void quantize_int8_block32(std::span<const float> x, std::span<std::int8_t> q,
                                     std::span<float> d);
MXMOE_API void dequantize_int8_block32(std::span<const std::int8_t> q, std::span<const float> d,
                                       std::span<float> out);

}  // namespace mxmoe
