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
inline void prefetch_group_block(const std::uint8_t* gb) noexcept {
  for (std::int64_t o = 0; o < kCompactGroupBlockBytes; o += 64)
    __builtin_prefetch(gb + kCompactAheadBytes + o, 0, 2);
}

// Quantizes one token's activations in the class's rule: codes [blocks * 32], scales [blocks].
using QuantizeX = void (*)(const float*, std::int64_t in, std::int64_t blocks, std::int8_t*,
                           float*) noexcept;

// The compact kernels' outer loop: tiles of up to kCompactTokenTile tokens, each quantized
// once on this stack by QUANTIZE, then tile(xq, dx, t0, n) over the task's rows, where token
// t's codes are xq[t * blocks * 32 ...] and its scales dx[t * blocks ...].
template <class Tile>
void compact_token_tiles(const LinearInt8Call& c, QuantizeX quantize, Tile&& tile) noexcept {
  const std::int64_t blocks = c.w.blocks;
  alignas(64) std::int8_t xq[kCompactTokenTile * (kCompactMaxIn + kBlock)];
  alignas(64) float dx[kCompactTokenTile * (kCompactMaxIn / kBlock + 1)];
  for (std::int64_t t0 = 0; t0 < c.tokens; t0 += kCompactTokenTile) {
    const std::int64_t n = std::min<std::int64_t>(kCompactTokenTile, c.tokens - t0);
    for (std::int64_t t = 0; t < n; ++t)
      quantize(c.x + (t0 + t) * c.in, c.in, blocks, xq + t * blocks * kBlock, dx + t * blocks);
    tile(static_cast<const std::int8_t*>(xq), static_cast<const float*>(dx), t0, n);
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

// sweep_groups for kernels whose registers hold two tokens: tile(T, group, o, valid, tt) for
// tokens tt .. tt + T of a token tile of N, T = 2 (as std::integral_constant), then 1 for an
// odd last token.
template <class Tile>
void sweep_groups_two_tokens(const CompactWeights& w, std::int64_t row0, std::int64_t rows,
                             std::int64_t n, Tile&& tile) noexcept {
  sweep_groups(row0, rows, [&](std::int64_t g, std::int64_t valid) {
    const std::uint8_t* group = w.group(g);
    const std::int64_t o = g * kCompactGroupRows;
    const int v = static_cast<int>(valid);
    std::int64_t tt = 0;
    for (; tt + 2 <= n; tt += 2) tile(std::integral_constant<std::size_t, 2>{}, group, o, v, tt);
    if (tt < n) tile(std::integral_constant<std::size_t, 1>{}, group, o, v, tt);
  });
}

}  // namespace
}  // namespace mxmoe::dense
