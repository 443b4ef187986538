// Kernels of the int16 class (the avx2_int16 and neon_int16 backends): bf16 activations carried as
// int16 with one power-of-two scale per 32-element block, exact int32 block dots by vpmaddwd, the
// int8 class's packed 16-row groups, an fp32 epilogue of one multiply and one fma per block. Plain
// functions compiled with the AVX2 flags in kernels/avx2/int16_block32__avx2.cpp (no STL there),
// called only after the backend's check() passed.
//
// Numerics (the definition; tests/backends_integer/int16_kernels_test.cpp has a scalar model):
//   b_i   = bf16(x_i) (round to nearest even, mxmoe::f32_to_bf16)          (per token)
//   per 32-block: M = max |b_i|;
//     a b_i is Inf or NaN -> d = NaN, q = 0 (the block's outputs are NaN);
//     M = 0               -> d = 0, q = 0;
//     else e = floor(log2 M), d = 2^(e-14), q_i = RNE(b_i * 2^(14-e)).
//   |q_i| <= 32640 (M has 8 significant bits). q_i = b_i / d exactly if |b_i| >= 2^-7 M, so a
//   block whose values span less than 2^7 is carried exactly; smaller values are rounded to
//   a multiple of d (error <= d/2 = 2^(e-15) <= 2^-15 M, below bf16's own rounding of M).
//   dot_b = sum over block b of (2*E2M1 code) * q_i, exact in int32 (|dot_b| <= 12.6e6 < 2^24,
//           so (float)dot_b is exact too), formed as vpmaddwd of the biased codes 2c + 12
//           (0..24) and q, starting from corr = -12 * sum(q).
//   acc   = fma((float)dot_b * d_b, 2^(e_b - 128), acc) for b = 0, 1, ... in order, acc0 = +0.
//           (float)dot_b * d_b is the block's dot in activation units, exact unless it falls
//           below 2^-126; the weight scale enters the one rounding of the fma. (The int8
//           class multiplies the two scales first; here that product could underflow to 0
//           while the block's contribution is still a float, or overflow to Inf against a
//           zero dot, for tokens far from unit scale.)
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/integer/int8_kernels.hpp"

namespace mxmoe::int16_kernels {

using QuantRows16 = int8_kernels::QuantRowsOf<std::int16_t>;
using int8_kernels::GluParams;

// n % 32 == 0: q[n] int16, d[n/32], corr[n/32] as defined above.
void int16_block32_quantize__avx2(const float* x, std::int64_t n, std::int16_t* q, float* d,
                                  std::int32_t* corr) noexcept;

// out[t * out_stride + i] = acc of row i of the 16-row group for token t (t < tokens),
// K = 32 * blocks; the group is packed as int8_kernels' (group16::kBlockBytes per block).
void int16_block32_gemm_16x8__avx2(const std::uint8_t* group, int blocks, const QuantRows16& x,
                                   int tokens, float* out, std::int64_t out_stride) noexcept;

// h: tokens rows of 64 floats [gate j0..15 | up j0..15 | gate j16..31 | up j16..31] (no
// bias). Adds the biases, applies the GLU (simd/glu_math.hpp) and quantizes each row's 32
// results as one block.
void int16_block32_glu_quantize__avx2(const float* h, int tokens, const float* gate_bias,
                                      const float* up_bias, const GluParams& p, std::int16_t* q,
                                      float* d, std::int32_t* corr, std::int64_t q_stride,
                                      std::int64_t s_stride) noexcept;

// The same three on aarch64 Advanced SIMD (kernels/neon/int16_block32__neon.cpp, smlal block dots),
// the same bits: the neon_int16 backend.
void int16_block32_quantize__neon(const float* x, std::int64_t n, std::int16_t* q, float* d,
                                  std::int32_t* corr) noexcept;
void int16_block32_gemm_16x4__neon(const std::uint8_t* group, int blocks, const QuantRows16& x,
                                   int tokens, float* out, std::int64_t out_stride) noexcept;
void int16_block32_glu_quantize__neon(const float* h, int tokens, const float* gate_bias,
                                      const float* up_bias, const GluParams& p, std::int16_t* q,
                                      float* d, std::int32_t* corr, std::int64_t q_stride,
                                      std::int64_t s_stride) noexcept;

}  // namespace mxmoe::int16_kernels
