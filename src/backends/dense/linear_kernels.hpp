// The kernels of dense::Linear (dense_linear.hpp): plain data and declarations only, so that
// no inline code is shared with the ISA objects (kernels/<SET>/). Each kernel computes a
// block of output rows for every token of a call; the driver splits the rows over the pool.
//
// Two numerics classes. Every kernel of a class gives the same bits for every (row, token)
// whatever the tile, the batch, the rows it was handed or the thread; the portable kernels
// here DEFINE the classes (linear_portable.cpp) and the ISA kernels follow them.
//
// dense_fp32_lanes16 (weights f32 or bf16 widened exactly, activations f32): 16 lanes; lane l
//   accumulates acc[l] = fma(w[k], x[k], acc[l]) for k = l, l + 16, l + 32, ... < in, in
//   increasing k, from acc = +0 (a k >= in adds nothing: the tail is masked, not padded);
//   then the halving tree s8[i] = acc[i] + acc[i + 8], s4[i] = s8[i] + s8[i + 4],
//   s2[i] = s4[i] + s4[i + 2], s = s2[0] + s2[1]; y = s + bias (when there is a bias).
//
// dense_int8_block32 (compact mode): W quantized at load per 32-block of a row, activations
//   per 32-block of a token at run time (both: d = amax / 127, q = round-half-even(v * (127 /
//   amax)) in [-127, 127], all zero and d = 0 for a zero block; see quantize_block32_portable),
//   a block past `in` is zero codes with d = 0. Block b's group g (g = 0..7, its elements
//   4g..4g+3) gives the exact integer q = sum of 4 code products; lane l = 8 (b mod 2) + g
//   accumulates acc[l] = fma(float(q), dw[b] * dx[b], acc[l]) for b in increasing order
//   (blocks past the last add nothing), from +0; then the same halving tree and bias.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mxmoe::dense {

inline constexpr int kLinearLanes = 16;
inline constexpr int kBlock = 32;  // compact mode's quantization block

// The f32-accumulation kernels: y[t * y_stride + o] = dot(W[o, :], x[t, :]) (+ bias[o]) for
// o in [row0, row0 + rows), t in [0, tokens).
struct LinearF32Call {
  const void* w = nullptr;   // [out, in] row-major
  bool bf16 = false;         // elements are bf16 bits (else f32)
  std::int64_t in = 0;       // any positive size (the tail is masked)
  const float* x = nullptr;  // [tokens, in]
  std::int64_t tokens = 0;
  float* y = nullptr;
  std::int64_t y_stride = 0;
  const float* bias = nullptr;  // f32 [out] or nullptr
};
using LinearF32Fn = void (*)(const LinearF32Call&, std::int64_t row0, std::int64_t rows) noexcept;

// The compact weights: a row is `blocks` 32-blocks rounded up to an even count (pairs: a pad
// block has zero codes and scale 0, so adding it changes no sum, since a sum is never -0):
// codes [out, pairs * 64], scales [out, pairs * 2].
struct CompactWeights {
  const std::int8_t* codes = nullptr;
  const float* scales = nullptr;
  std::int64_t blocks = 0;  // ceil(in / 32)
  std::int64_t rows = 0;    // the matrix's rows (prefetches stay inside it)
  std::int64_t pairs() const noexcept { return (blocks + 1) / 2; }
};

// How a compact kernel wants a row's codes laid out; the Linear packs its copy for the kernel it
// binds (the codes' values and the scales are the same in every layout):
//   plain: block b's 32 codes at [32 b, 32 b + 32);
//   vnni_pairs: a pair of blocks (2p, 2p + 1) is 64 bytes with group g (elements 4g..4g+3) of
//     block 2p + h at bytes 8g + 4h .. 8g + 4h + 3, so int32 lane 2g + h of a zmm holds that
//     group; each code is stored + 128, as an unsigned byte (vpdpbusd's unsigned operand).
enum class CompactLayout : std::uint8_t { plain, vnni_pairs };

// PAIRS pairs of plain codes (64 bytes each) rewritten in place as vnni_pairs.
void to_vnni_pairs(std::int8_t* codes, std::int64_t pairs) noexcept;

// Compact kernels quantize the tokens they need on their own stack, in tiles of at most
// kCompactTokenTile tokens: in must be at most kCompactMaxIn (check() refuses larger).
inline constexpr int kCompactTokenTile = 4;
inline constexpr std::int64_t kCompactMaxIn = 32768;

struct LinearInt8Call {
  CompactWeights w;
  std::int64_t in = 0;
  const float* x = nullptr;  // [tokens, in]
  std::int64_t tokens = 0;
  float* y = nullptr;
  std::int64_t y_stride = 0;
  const float* bias = nullptr;
};
using LinearInt8Fn = void (*)(const LinearInt8Call&, std::int64_t row0, std::int64_t rows) noexcept;

// One block of `count` (1..32) values: 32 codes (zero past count) and the scale, in the
// class's rule. The definition, used for the weights at load time and by the portable kernel.
float quantize_block32_portable(const float* v, int count, std::int8_t* codes) noexcept;

void linear_fp32_portable(const LinearF32Call&, std::int64_t row0, std::int64_t rows) noexcept;
void linear_int8_portable(const LinearInt8Call&, std::int64_t row0, std::int64_t rows) noexcept;

// x86-64 only (kernels/avx2, kernels/avx512, kernels/avx512_vnni): call them only when
// MXMOE_X86_KERNELS.
void linear_fp32_avx2(const LinearF32Call&, std::int64_t row0, std::int64_t rows) noexcept;
void linear_fp32_avx512(const LinearF32Call&, std::int64_t row0, std::int64_t rows) noexcept;
void linear_int8_avx2(const LinearInt8Call&, std::int64_t row0, std::int64_t rows) noexcept;
// The activations of one token in the class's rule: codes [pairs * 64] and scales [pairs * 2],
// the pad block zero (kernels/avx2; the avx512_vnni kernel calls it too).
void quantize_x_avx2(const float* x, std::int64_t in, std::int64_t pairs, std::int8_t* codes,
                     float* scales) noexcept;
void linear_int8_avx512_vnni(const LinearInt8Call&, std::int64_t row0, std::int64_t rows) noexcept;

// aarch64 only (kernels/neon, kernels/neon_dotprod): call them only when MXMOE_AARCH64_KERNELS.
void linear_fp32_neon(const LinearF32Call&, std::int64_t row0, std::int64_t rows) noexcept;
void linear_int8_neon_dotprod(const LinearInt8Call&, std::int64_t row0, std::int64_t rows) noexcept;

}  // namespace mxmoe::dense
