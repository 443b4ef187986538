// The kernels of dense::Linear (dense_linear.hpp): plain data and declarations only, so that
// no inline code is shared with the ISA objects (kernels/<SET>/). Each kernel computes a
// block of output rows for every token of a call; the driver splits the rows over the pool.
//
// Four numerics classes. Every kernel of a class gives the same bits for every (row, token)
// whatever the tile, the batch, the rows it was handed or the thread; the portable kernels
// here DEFINE the classes (dense_linear__portable.cpp) and the ISA kernels follow them.
//
// dense_fp32_lanes16 (weights f32 or bf16 widened exactly, activations f32): 16 lanes; lane l
//   accumulates acc[l] = fma(w[k], x[k], acc[l]) for k = l, l + 16, l + 32, ... < in, in
//   increasing k, from acc = +0 (a k >= in adds nothing: the tail is masked, not padded);
//   then the halving tree s8[i] = acc[i] + acc[i + 8], s4[i] = s8[i] + s8[i + 4],
//   s2[i] = s4[i] + s4[i + 2], s = s2[0] + s2[1]; y = s + bias (when there is a bias).
//
// dense_bf16_pairs16 (bf16 weights as published, activations rounded to bf16): vdpbf16ps's
//   arithmetic, written out. Each x is rounded to bf16 round-half-even after an f32 subnormal
//   is flushed to a zero of its sign (vcvtne2ps2bf16); w and x elements past `in` are +0.
//   16 lanes; step j covers k in [32 j, 32 j + 32), and lane l its pair k = 32 j + 2 l, +1:
//   acc[l] = ftz(fma(daz(w[k+1]), daz(x[k+1]), acc[l])), then the same for k, in increasing j
//   from acc = +0, where daz() reads a bf16 subnormal as a zero of its sign and ftz() flushes
//   a subnormal result to a zero of its sign (a bf16 product is exact in f32, so each fma is
//   one rounding); then dense_fp32_lanes16's halving tree and bias. Checked against the
//   instruction over the whole exponent range on Zen 4 (tests/dense). Twice the products per
//   instruction of dense_fp32_lanes16, and no widening of the weights.
//
// dense_int8_rows16 (compact mode): W quantized at load per 32-block of a row, activations
//   per 32-block of a token at run time (both: d = amax / 127, q = round-half-even(v * (127 /
//   amax)) in [-127, 127], all zero and d = 0 for a zero block; see quantize_block32_portable);
//   the last block of a row is short when in % 32 != 0 (its missing codes are zero). For each
//   block b in increasing order, the exact integer q_b = sum of its 32 code products and
//   acc = fma(float(q_b), dw[b] * dx[b], acc) (the product rounded once), from acc = +0; then
//   y = acc + bias (when there is a bias). One chain per (row, token), as the experts' int8
//   class: a kernel puts 16 rows in the lanes and spends one conversion, one multiply and one
//   FMA per 16 rows and block, against 8 dot-product instructions (dense_int8_block32, its
//   predecessor, spent them per row and pair of blocks: a third of the VNNI peak at most).
//
// dense_int4_rows16 (compact mode, 4 bits): W quantized at load per 32-block of a row: m is the
//   block's element of largest magnitude (the first of equal ones; a NaN never), d = bf16(m /
//   -8) (the f32 quotient rounded half to even to bf16); a block whose d is zero, subnormal or
//   not finite is all zero codes with d = 0; otherwise q = round-half-even(v / d) (one f32
//   division) clamped to [-8, 7], a NaN v giving -8. So m itself is code -8 exactly, and the
//   step is m / 8 where a symmetric [-7, 7] code would step m / 7. Activations and the sums
//   are dense_int8_rows16's, with these codes and scales: each block's exact integer sum
//   (|q_b| <= 32 * 8 * 127), then acc = fma(float(q_b), dw[b] * dx[b], acc). Half the bytes
//   of dense_int8_rows16 (4.5 bits a weight, GGUF Q4_0's), for a step 16x as coarse.
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

// dense_bf16_pairs16 kernels take a LinearF32Call too (bf16 weights only) and round a token
// tile of x on their own stack: in must be at most kBf16MaxIn (check() refuses larger).
inline constexpr int kBf16TokenTile = 8;
inline constexpr std::int64_t kBf16MaxIn = 16384;
inline constexpr int kBf16Step = 32;  // elements of one step (16 lanes x a pair)

// The compact weights, packed by groups of 16 rows (the last group's missing rows are zero
// codes with scale 0, never stored): group G, block b is kCompactGroupBlockBytes at
// (G * blocks + b) * kCompactGroupBlockBytes: 512 code bytes, byte 64 k4 + 4 i + j the code of
// row 16 G + i, element 32 b + 4 k4 + j (so 64 bytes are 16 rows' 4 consecutive codes: one
// vpdpbusd operand, two for a ymm, four sdot operands), then the 16 rows' f32 scales dw.
inline constexpr int kCompactGroupRows = 16;
inline constexpr std::int64_t kCompactGroupCodeBytes = 512;
inline constexpr std::int64_t kCompactGroupBlockBytes = 512 + 16 * 4;
struct CompactWeights {
  const std::uint8_t* packed = nullptr;
  std::int64_t blocks = 0;  // ceil(in / 32)
  std::int64_t rows = 0;    // the matrix's rows
  std::int64_t block_bytes = kCompactGroupBlockBytes;  // kCompact4GroupBlockBytes for int4
  std::int64_t groups() const noexcept { return (rows + kCompactGroupRows - 1) / kCompactGroupRows; }
  const std::uint8_t* group(std::int64_t g) const noexcept {
    return packed + g * blocks * block_bytes;
  }
};

// dense_int4_rows16's weights, in the same groups of 16 rows: group G, block b is
// kCompact4GroupBlockBytes at (G * blocks + b) * kCompact4GroupBlockBytes: 256 code bytes, byte
// 64 c + 4 i + j (c < 4, i < 16, j < 4) holding row 16 G + i's code + 8 (in [0, 15]) of element
// 32 b + 8 c + j in its low nibble and of element 32 b + 8 c + 4 + j in its high nibble (so the
// low nibbles of 64 bytes are rows16's operand 2 c and the high nibbles its operand 2 c + 1),
// then the 16 rows' bf16 scales. Every ISA reads this one layout: the codes are unsigned, and a
// kernel removes the excess 8 * sum(x codes) of a block by starting the block's sum there.
inline constexpr std::int64_t kCompact4GroupCodeBytes = 256;
inline constexpr std::int64_t kCompact4GroupBlockBytes = 256 + 16 * 2;
inline constexpr int kCompact4Bias = 8;

// How a compact kernel wants the codes (the scales and the order are the same in both):
//   rows16: the signed codes;
//   rows16_biased: each code + 128 as an unsigned byte (vpdpbusd's unsigned operand; the
//     kernel removes the excess 128 * sum(x codes) by starting each block's sum there).
enum class CompactLayout : std::uint8_t { rows16, rows16_biased };

// Compact kernels quantize the tokens they need on their own stack, in tiles of at most
// kCompactTokenTile tokens: in must be at most kCompactMaxIn (check() refuses larger).
inline constexpr int kCompactTokenTile = 8;
inline constexpr std::int64_t kCompactMaxIn = 32768;

struct LinearCompactCall {
  CompactWeights w;
  std::int64_t in = 0;
  const float* x = nullptr;  // [tokens, in]
  std::int64_t tokens = 0;
  float* y = nullptr;
  std::int64_t y_stride = 0;
  const float* bias = nullptr;
};
using LinearCompactFn = void (*)(const LinearCompactCall&, std::int64_t row0, std::int64_t rows) noexcept;

// One block of `count` (1..32) values: 32 codes (zero past count) and the scale, in the
// class's rule. The definition, used for the weights at load time and by the portable kernel.
float quantize_block32_portable(const float* v, int count, std::int8_t* codes) noexcept;
// dense_int4_rows16's weight block: 32 codes in [-8, 7] (zero past count) and the bf16 bits of
// its scale d. Load time only, so this one definition serves every ISA.
std::uint16_t quantize_block32_int4(const float* v, int count, std::int8_t* codes) noexcept;

// Compact kernels are handed rows [row0, row0 + rows) with row0 a multiple of 16 (whole groups).
void dense_fp32_lanes16_linear__portable(const LinearF32Call&, std::int64_t row0,
                                         std::int64_t rows) noexcept;
void dense_bf16_pairs16_linear__portable(const LinearF32Call&, std::int64_t row0,
                                         std::int64_t rows) noexcept;
// x rounded in dense_bf16_pairs16's rule (the definition).
std::uint16_t round_x_bf16_portable(float x) noexcept;
void dense_int8_rows16_linear__portable(const LinearCompactCall&, std::int64_t row0,
                                        std::int64_t rows) noexcept;
void dense_int4_rows16_linear__portable(const LinearCompactCall&, std::int64_t row0,
                                        std::int64_t rows) noexcept;

// x86-64 only (kernels/avx2, kernels/avx512, kernels/avx512_vnni, kernels/avx512_bf16): call
// them only when MXMOE_X86_KERNELS.
void dense_fp32_lanes16_linear__avx2(const LinearF32Call&, std::int64_t row0,
                                     std::int64_t rows) noexcept;
void dense_fp32_lanes16_linear__avx512(const LinearF32Call&, std::int64_t row0,
                                       std::int64_t rows) noexcept;
void dense_int8_rows16_linear__avx2(const LinearCompactCall&, std::int64_t row0,
                                    std::int64_t rows) noexcept;
// The activations of one token in the class's rule: codes [blocks * 32] (zero past in) and
// scales [blocks] (kernels/avx2; the avx512_vnni kernel calls it too).
void dense_rows16_quantize__avx2(const float* x, std::int64_t in, std::int64_t blocks,
                                 std::int8_t* codes, float* scales) noexcept;
void dense_int8_rows16_linear__avx512_vnni(const LinearCompactCall&, std::int64_t row0,
                                           std::int64_t rows) noexcept;
void dense_int4_rows16_linear__avx2(const LinearCompactCall&, std::int64_t row0,
                                    std::int64_t rows) noexcept;
void dense_int4_rows16_linear__avx512_vnni(const LinearCompactCall&, std::int64_t row0,
                                           std::int64_t rows) noexcept;
void dense_bf16_pairs16_linear__avx512_bf16(const LinearF32Call&, std::int64_t row0,
                                            std::int64_t rows) noexcept;

// aarch64 only (kernels/neon, kernels/neon_dotprod): call them only when MXMOE_AARCH64_KERNELS.
void dense_fp32_lanes16_linear__neon(const LinearF32Call&, std::int64_t row0,
                                     std::int64_t rows) noexcept;
void dense_int8_rows16_linear__neon_dotprod(const LinearCompactCall&, std::int64_t row0,
                                            std::int64_t rows) noexcept;
void dense_int4_rows16_linear__neon_dotprod(const LinearCompactCall&, std::int64_t row0,
                                            std::int64_t rows) noexcept;

}  // namespace mxmoe::dense
