// What every ISA kernel of dense::Linear shares (kernels/*): the last step of a sum, the sweep
// of a task's rows in tiles, and the compact kernels' token tiles. Include ONLY from
// kernels/*.cpp; everything here has internal linkage (an unnamed namespace), so objects
// built with different ISA flags never share a body through the linker.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/dense/linear_kernels.hpp"

namespace mxmoe::dense {
namespace {

constexpr std::int64_t I(std::size_t v) noexcept {
  return static_cast<std::int64_t>(v);
}

// y = s (+ bias): the class's last step.
inline void store(float* y, const float* bias, std::int64_t o, float s) noexcept {
  *y = bias != nullptr ? s + bias[o] : s;
}

// Rows [row0, row0 + rows): step(o, R) for R rows at a time, then step(o, 1) for the rest
// (R and 1 as std::integral_constant, for the tile templates).
template <std::size_t R, class Step>
void sweep_rows(std::int64_t row0, std::int64_t rows, Step&& step) noexcept {
  std::int64_t o = row0;
  for (; o + I(R) <= row0 + rows; o += I(R)) step(o, std::integral_constant<std::size_t, R>{});
  for (; o < row0 + rows; ++o) step(o, std::integral_constant<std::size_t, 1>{});
}

// Prefill's loop order: the task's rows in blocks whose weights stay in L2 (about
// kL2WeightBytes), each block swept by every token tile, so a weight comes from memory once per
// call, not once per token tile (gpt-oss-20b's q projection, 23.6 MB of bf16, was streamed from
// DRAM 86 times for a 512-token prompt). The bits do not change: each (row, token) sum is the
// same. A block is a multiple of 24 rows, so the row tiles (3, 4, 6, 8) divide it.
inline constexpr std::int64_t kL2WeightBytes = 384 * 1024;
template <class Tiles>
void row_blocks(std::int64_t row0, std::int64_t rows, std::int64_t row_bytes, Tiles&& tiles) noexcept {
  const std::int64_t block = std::max<std::int64_t>(24, kL2WeightBytes / row_bytes / 24 * 24);
  for (std::int64_t r = row0; r < row0 + rows; r += block) tiles(r, std::min(block, row0 + rows - r));
}

// The register tiles of the kernels that keep one zmm a (row, token) sum (avx512_fp32,
// avx512_bf16_bf16): for a token tile of `tokens` (1..8), as many rows R as the 32 registers
// allow beside the R weights and one x: calls sweep.template operator()<R, T>().
template <class Sweep>
void zmm_sum_tiles(std::int64_t tokens, Sweep&& sweep) noexcept {
  switch (tokens) {
    case 1:
      return sweep.template operator()<8, 1>();
    case 2:
      return sweep.template operator()<6, 2>();
    case 3:
      return sweep.template operator()<6, 3>();
    case 4:
      return sweep.template operator()<4, 4>();
    case 5:
      return sweep.template operator()<4, 5>();
    case 6:
      return sweep.template operator()<4, 6>();
    case 7:
      return sweep.template operator()<3, 7>();
    default:
      return sweep.template operator()<3, 8>();
  }
}

// Compact kernels read a group's blocks as one stream; at few tokens they read it faster than
// the hardware prefetcher follows, so each block asks for the bytes kCompactAheadBytes further
// on into L2 (the experts' int8 kernels measured 4 KiB best, docs/perf/BACKENDS_INT8.md).
// Past the matrix's end this asks for nothing harmful: prefetches never fault.
constexpr std::int64_t kCompactAheadBytes = 4096;
inline void prefetch_group_block(const std::uint8_t* gb, std::int64_t block_bytes) noexcept {
  for (std::int64_t o = 0; o < block_bytes; o += 64)
    __builtin_prefetch(gb + kCompactAheadBytes + o, 0, 2);
}

// Quantizes one token's activations in the class's rule: codes [blocks * 32], scales [blocks].
using QuantizeX = void (*)(const float*, std::int64_t in, std::int64_t blocks, std::int8_t*,
                           float*) noexcept;

// corr[b] = -BIAS * (sum of block b's 32 codes), for BLOCKS blocks of one token: the excess of
// unsigned weight codes (code + BIAS) against signed activation codes, removed by starting
// each block's integer sum there.
inline void code_corrections(const std::int8_t* codes, std::int64_t blocks, std::int64_t bias,
                             std::int32_t* corr) noexcept {
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::int32_t sum = 0;
    for (int k = 0; k < kBlock; ++k) sum += codes[b * kBlock + k];
    corr[b] = static_cast<std::int32_t>(-bias * sum);
  }
}

// The compact kernels' outer loop: tiles of up to kCompactTokenTile tokens, each quantized
// once on this stack by QUANTIZE (with its blocks' corrections for weight codes biased by
// BIAS; none when BIAS is 0), then tile(xq, dx, corr, t0, n) over the task's rows, where token
// t's codes are xq[t * blocks * 32 ...], its scales dx[t * blocks ...] and its corrections
// corr[t * blocks ...].
template <std::int64_t Bias, class Tile>
void compact_token_tiles(const LinearCompactCall& c, QuantizeX quantize, Tile&& tile) noexcept {
  const std::int64_t blocks = c.w.blocks;
  alignas(64) std::int8_t xq[kCompactTokenTile * (kCompactMaxIn + kBlock)];
  alignas(64) float dx[kCompactTokenTile * (kCompactMaxIn / kBlock + 1)];
  alignas(64) std::int32_t corr[Bias == 0 ? 1 : kCompactTokenTile * (kCompactMaxIn / kBlock + 1)];
  for (std::int64_t t0 = 0; t0 < c.tokens; t0 += kCompactTokenTile) {
    const std::int64_t n = std::min<std::int64_t>(kCompactTokenTile, c.tokens - t0);
    for (std::int64_t t = 0; t < n; ++t) {
      quantize(c.x + (t0 + t) * c.in, c.in, blocks, xq + t * blocks * kBlock, dx + t * blocks);
      if constexpr (Bias != 0)
        code_corrections(xq + t * blocks * kBlock, blocks, Bias, corr + t * blocks);
    }
    tile(static_cast<const std::int8_t*>(xq), static_cast<const float*>(dx),
         static_cast<const std::int32_t*>(corr), t0, n);
  }
}

// Groups [row0 / 16, (row0 + rows + 15) / 16) of a task (row0 is a multiple of 16): step(g,
// valid) where VALID is how many of the group's 16 rows are stored (fewer in the matrix's
// last group, or when the task ends inside a group).
template <class Step>
void sweep_groups(std::int64_t row0, std::int64_t rows, Step&& step) noexcept {
  for (std::int64_t o = row0; o < row0 + rows; o += kCompactGroupRows)
    step(o / kCompactGroupRows, std::min<std::int64_t>(kCompactGroupRows, row0 + rows - o));
}

// The whole compact kernel for those whose registers hold two tokens (avx2, neon_dotprod): the
// token tiles of compact_token_tiles<BIAS>, each swept group by group, two tokens at a time and
// one for an odd last token: group_tile(T, group, o, valid, xq, dx, corr, tt, t0) for tokens
// tt .. tt + T of the tile (T as std::integral_constant), whose outputs go to tokens t0 + tt ...
template <std::int64_t Bias, class GroupTile>
void two_token_compact(const LinearCompactCall& c, std::int64_t row0, std::int64_t rows,
                       QuantizeX quantize, GroupTile&& group_tile) noexcept {
  compact_token_tiles<Bias>(c, quantize, [&](const std::int8_t* xq, const float* dx,
                                             const std::int32_t* corr, std::int64_t t0,
                                             std::int64_t n) {
    sweep_groups(row0, rows, [&](std::int64_t g, std::int64_t valid) {
      const std::uint8_t* group = c.w.group(g);
      const std::int64_t o = g * kCompactGroupRows;
      const int v = static_cast<int>(valid);
      std::int64_t tt = 0;
      for (; tt + 2 <= n; tt += 2)
        group_tile(std::integral_constant<std::size_t, 2>{}, group, o, v, xq, dx, corr, tt, t0);
      if (tt < n)
        group_tile(std::integral_constant<std::size_t, 1>{}, group, o, v, xq, dx, corr, tt, t0);
    });
  });
}

}  // namespace
}  // namespace mxmoe::dense
