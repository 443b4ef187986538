// Rounding of a GEMM input to the Request's activation format, per token (per 32-element
// block at most), so the result never depends on other tokens of the batch. The quantizers
// are those of mxmoe/format.hpp: a fast backend that quantizes with them sees bit-identical
// inputs to the reference backend's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "mxmoe/format.hpp"

namespace mxmoe {

// Scratch bytes round_activations needs for n elements (a multiple of 32).
std::size_t rounding_scratch_bytes(std::size_t n) noexcept;

// out = dequantize(quantize(in)) in format f: f32 identity; bf16 round-to-nearest-even;
// int8 symmetric per 32-element block; mxfp8 E4M3 with the round-up E8M0 scale rule.
// in and out may alias. scratch: rounding_scratch_bytes(in.size()), 4-byte aligned.
void round_activations(ActivationFormat f, std::span<const float> in, std::span<float> out,
                       std::byte* scratch);

// avx2_int16's GEMM inputs, portably (the definition is src/backends/integer/int16_kernels.hpp):
// bf16(x) (f32_to_bf16), then per 32-block with M = max |bf16(x_i)| > 0 finite and
// e = floor(log2 M): q_i = RNE(bf16(x_i) * 2^(14-e)), out_i = q_i * 2^(e-14) (exact); an all-zero
// block stays zero, a block holding Inf or NaN becomes NaN. n % 32 == 0; in and out may alias.
// Used by the float64 evaluator (src/verify) to round as that backend does.
void round_activations_int16_blocks(std::span<const float> in, std::span<float> out);

// The bf16 backends' inputs (avx512_bf16, amx_bf16): the rounded activations as bf16 bits.
//   bf16:  round to nearest even (f32_to_bf16), as round_activations;
//   mxfp8: round_activations' values, which are exactly bf16 values (an E4M3 value has 4
//          significant bits, times 2^(s-127) an exact power of two) except below 2^-126:
//          those are written as a signed zero, which is what vdpbf16ps / TDPBF16PS make of
//          any bf16 subnormal input; so the kernels compute exactly with these bits, and the
//          reference's semantics differ only by the dropped products (|v w| < 2^-126 |w| each;
//          proof and bound in docs/ACCURACY.md).
// Other formats are not bf16 values: std::invalid_argument. scratch: rounding_bf16_scratch_bytes.
std::size_t rounding_bf16_scratch_bytes(std::size_t n) noexcept;
void round_activations_bf16(ActivationFormat f, std::span<const float> in,
                            std::span<std::uint16_t> out, std::byte* scratch);
// The bf16 bits round_activations_bf16 gives for a value already rounded to MXFP8 (exact, or
// a signed zero below 2^-126). Exposed for the exhaustive test.
std::uint16_t mxfp8_value_to_bf16(float v) noexcept;

}  // namespace mxmoe
