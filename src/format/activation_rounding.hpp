// Rounding of a GEMM input to the Request's activation format, per token (per 32-element
// block at most), so the result never depends on other tokens of the batch. The quantizers
// are those of mxmoe/format.hpp: a fast backend that quantizes with them sees bit-identical
// inputs to the reference backend's.
#pragma once

#include <cstddef>
#include <span>

#include "mxmoe/deployment.hpp"

namespace mxmoe {

// Scratch bytes round_activations needs for n elements (a multiple of 32).
std::size_t rounding_scratch_bytes(std::size_t n) noexcept;

// out = dequantize(quantize(in)) in format f: f32 identity; bf16 round-to-nearest-even;
// int8 symmetric per 32-element block; mxfp8 E4M3 with the round-up E8M0 scale rule.
// in and out may alias. scratch: rounding_scratch_bytes(in.size()), 4-byte aligned.
void round_activations(ActivationFormat f, std::span<const float> in, std::span<float> out,
                       std::byte* scratch);

}  // namespace mxmoe
