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
void store(float* y, const float* bias, std::int64_t o, float s) noexcept {
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

// Compact kernels at few tokens read their rows faster than the hardware prefetcher follows
// them (a row's codes are one or two 4 KiB pages, a new stream each): each tile asks for the
// same offset kCompactAheadRows rows further on, into L2 (about twice the 2-4 rows a tile
// reads ahead; 4, 8 and 16 were measured, 4 and 8 alike). ahead_row(w, o): the row that the
// reads of row o prefetch.
constexpr std::int64_t kCompactAheadRows = 8;
inline std::int64_t ahead_row(const CompactWeights& w, std::int64_t o) noexcept {
  return std::min(o + kCompactAheadRows, w.rows - 1);
}
inline void prefetch_l2(const void* p) noexcept {
  __builtin_prefetch(p, 0, 2);
}

// The compact kernels' outer loop: tiles of up to kCompactTokenTile tokens, each quantized
// once on this stack by QUANTIZE (the class's rule), then tile(xq, dx, t0, tokens) over the
// task's rows.
using QuantizeX = void (*)(const float*, std::int64_t, std::int64_t, std::int8_t*, float*) noexcept;
template <class Tile>
void compact_token_tiles(const LinearInt8Call& c, QuantizeX quantize, Tile&& tile) noexcept {
  const std::int64_t stride = 2 * c.w.pairs();
  alignas(64) std::int8_t xq[kCompactTokenTile * (kCompactMaxIn + 2 * kBlock)];
  float dx[kCompactTokenTile * (kCompactMaxIn / kBlock + 2)];
  for (std::int64_t t0 = 0; t0 < c.tokens; t0 += kCompactTokenTile) {
    const std::int64_t n = std::min<std::int64_t>(kCompactTokenTile, c.tokens - t0);
    for (std::int64_t t = 0; t < n; ++t)
      quantize(c.x + (t0 + t) * c.in, c.in, c.w.pairs(), xq + t * stride * kBlock, dx + t * stride);
    tile(static_cast<const std::int8_t*>(xq), static_cast<const float*>(dx), t0, n);
  }
}

}  // namespace
}  // namespace mxmoe::dense
