// Kernels of the int8-activation backends (avx512_vnni, amx_int8, avx2_int8, avx_vnni_int8,
// neon_dotprod_int8, neon_i8mm_int8, sve_int8).
// Plain functions, compiled
// with their ISA flags in kernels/*.cpp (only <immintrin.h> there, no STL: nothing inline is
// shared with portable TUs); the Backend classes call them only after check() passed.
//
// Numerics (identical in every path, so decode/prefill/VNNI/AMX give the same bits):
//   x_q, d_x  = quantize_int8_block32(x)                       (per token, per 32-block)
//   dot_b     = exact int32 sum over block b of (2*E2M1 code) * x_q      (VNNI or AMX)
//   scale_b   = d_x[b] * 2^(e_b - 128)      (one rounding; 2^(e-128) built exactly from bits,
//                                            subnormal for e = 0, 1; FTZ/DAZ stay off)
//   acc       = fma((float)dot_b, scale_b, acc)   for b = 0, 1, 2, ... in order, acc0 = +0
// The bias is added once after the last block by the caller-shared code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/common/group16_layout.hpp"
#include "backends/common/simd/glu_params.hpp"

namespace mxmoe::int8_kernels {

// Packed weights: the 16-row groups of common/group16_layout.hpp (per group and 32-wide K block,
// 256 nibble bytes then the 16 rows' E8M0 scales, the MXFP4 source's 272 bytes). Nibble byte
// 64*h + 4*i + j holds row i's element 8h+j (low nibble) and 8h+4+j (high nibble), so the low
// and high nibbles of 64 bytes are directly the [k/4][row][k%4] operand of vpdpbusd and the
// 8 x 64-byte B tile of TDPBSSD.
inline constexpr std::size_t kAmxBTileBytes = 512;    // one decoded (group, block): 8 x 64 int8
inline constexpr std::size_t kAmxCScratchInts = 512;  // two 16 x 16 int32 C tiles in flight

// Quantized activations of consecutive rows (tokens or slots): int8 here, int16 for the
// avx2_int16 class (int16_kernels.hpp).
template <class Q>
struct QuantRowsOf {
  const Q* q = nullptr;                // [rows][q_stride] quantized values
  const float* d = nullptr;            // [rows][s_stride] block scales
  const std::int32_t* corr = nullptr;  // [rows][s_stride] -12 * sum of the block's codes
  std::int64_t q_stride = 0;
  std::int64_t s_stride = 0;
};
using QuantRows = QuantRowsOf<std::int8_t>;

// Expert nonlinearities, shared with the other AVX-512 kernels (backends/common/simd/).
using simd::GluParams;
using simd::kGluSilu;
using simd::kGluSiluClamp;
using simd::kGluSwigluOai;

// --- avx512_vnni (kernels/avx512_vnni/int8_block32__avx512_vnni.cpp) ----------------------
// n % 32 == 0. Same bits as mxmoe::quantize_int8_block32; also corr[b] = -12 * sum(q of block b).
void int8_block32_quantize__avx512_vnni(const float* x, std::int64_t n, std::int8_t* q, float* d,
                                        std::int32_t* corr) noexcept;

// out[t * out_stride + i] = acc of row i of the group for token t (t < tokens), K = 32*blocks.
void int8_block32_gemm_16x8__avx512_vnni(const std::uint8_t* group, int blocks, const QuantRows& x,
                                         int tokens, float* out, std::int64_t out_stride) noexcept;

// h: tokens rows of 64 floats [gate j0..15 | up j0..15 | gate j16..31 | up j16..31] (no bias).
// Adds the biases (32 each), applies the GLU and quantizes each row's 32 results as one block.
void int8_block32_glu_quantize__avx512_vnni(const float* h, int tokens, const float* gate_bias,
                                            const float* up_bias, const GluParams& p,
                                            std::int8_t* q, float* d, std::int32_t* corr,
                                            std::int64_t q_stride, std::int64_t s_stride) noexcept;

// --- avx2 (kernels/avx2/int8_block32__avx2.cpp): the same three on ymm, the same bits ------
void int8_block32_quantize__avx2(const float* x, std::int64_t n, std::int8_t* q, float* d,
                                 std::int32_t* corr) noexcept;
// Block dots by vpmaddubsw + vpmaddwd.
void int8_block32_gemm_16x8__avx2(const std::uint8_t* group, int blocks, const QuantRows& x,
                                  int tokens, float* out, std::int64_t out_stride) noexcept;
void int8_block32_glu_quantize__avx2(const float* h, int tokens, const float* gate_bias,
                                     const float* up_bias, const GluParams& p, std::int8_t* q,
                                     float* d, std::int32_t* corr, std::int64_t q_stride,
                                     std::int64_t s_stride) noexcept;

// --- avx_vnni (kernels/avx_vnni/int8_block32_gemm_16x8__avx_vnni.cpp) ---------------------
// The GEMM with VEX vpdpbusd on ymm.
void int8_block32_gemm_16x8__avx_vnni(const std::uint8_t* group, int blocks, const QuantRows& x,
                                      int tokens, float* out, std::int64_t out_stride) noexcept;

// --- aarch64 (kernels/neon_dotprod/int8_block32__neon_dotprod.cpp): the three on Advanced SIMD
// with the dot-product extension (sdot by lane), the same bits ------------------------------
void int8_block32_quantize__neon_dotprod(const float* x, std::int64_t n, std::int8_t* q, float* d,
                                         std::int32_t* corr) noexcept;
void int8_block32_gemm_16x4__neon_dotprod(const std::uint8_t* group, int blocks, const QuantRows& x,
                                          int tokens, float* out, std::int64_t out_stride) noexcept;
void int8_block32_glu_quantize__neon_dotprod(const float* h, int tokens, const float* gate_bias,
                                             const float* up_bias, const GluParams& p,
                                             std::int8_t* q, float* d, std::int32_t* corr,
                                             std::int64_t q_stride, std::int64_t s_stride) noexcept;
// kernels/neon_i8mm/: the GEMM with smmla (two rows by two tokens an instruction).
void int8_block32_gemm_16x8__neon_i8mm(const std::uint8_t* group, int blocks, const QuantRows& x,
                                       int tokens, float* out, std::int64_t out_stride) noexcept;
// kernels/sve/: the GEMM with SVE sdot by lane, vector-length agnostic (128 to 2048 bits).
void int8_block32_gemm_16x4__sve(const std::uint8_t* group, int blocks, const QuantRows& x,
                                 int tokens, float* out, std::int64_t out_stride) noexcept;

// --- amx (kernels/amx_int8/int8_block32__amx_int8.cpp) ------------------------------------
// The calling thread must hold the AMX permission (process-wide, see amx_permission.hpp).
// LDTILECFG for int8_block32_gemm_16x16__amx_int8, per thread:
void int8_block32_tile_config__amx_int8() noexcept;
void int8_block32_tile_release__amx_int8() noexcept;  // TILERELEASE
// Decodes blocks of one packed group into signed B tiles (blocks x 512 bytes) and the exact
// weight scales 2^(e-128) (blocks x 16 floats).
void int8_block32_decode_group__amx_int8(const std::uint8_t* group, int blocks,
                                         std::int8_t* b_tiles, float* weight_scale) noexcept;
// Any tokens >= 1, but x must have readable rows up to tokens rounded up to 16 (a partial last
// tile is computed whole; only its first rows are stored). c_scratch: kAmxCScratchInts int32,
// 64-byte aligned. Same bits as int8_block32_gemm_16x8__avx512_vnni.
void int8_block32_gemm_16x16__amx_int8(const std::int8_t* b_tiles, const float* weight_scale,
                                       int blocks, const QuantRows& x, int tokens, float* out,
                                       std::int64_t out_stride, std::int32_t* c_scratch) noexcept;

}  // namespace mxmoe::int8_kernels
