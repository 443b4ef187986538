// Kernels of the amx_bf16 backend (kernels/bf16_amx_tiles__amx_bf16.cpp, compiled with the AMX
// flags; only <immintrin.h> there). Plain functions; the driver (bf16_expert_kernel.cpp) calls them
// only after check() passed and the AMX permission is held.
//
// Numerics (one path for every batch size, so results are batch invariant):
//   x_bf16 = RNE(x) per token (mxmoe::f32_to_bf16 bit for bit)
//   w_bf16 = E2M1 x 2^(e-127), exact in bf16 for a "foldable" scale (bf16_fold.hpp: 64..250)
//   C      = TDPBF16PS over the K blocks b = 0, 1, 2, ... in order, one fp32 C tile per
//            (16 tokens, 16 outputs) kept in the tile register for the whole K loop.
//   A group (16 rows) with any other scale is decoded unscaled instead; each of
//   its blocks is a separate product and acc = fma(C_b, 2^(e-127), acc) in fp32, in order.
// A token's row of C depends only on that token's A row and the weights, never on which
// other rows share the tile, so neither the batch nor the thread count changes a bit.
// TDPBF16PS treats bf16 subnormal inputs as zero and flushes subnormal results: an
// activation below 2^-126 counts as 0, and a folded group also drops products below 2^-126
// (an unfolded one keeps them until its fp32 scaling). Either way an output moves by at most
// K x 2^-126, far inside the 1e-5 relative contract against the reference backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/common/group16_layout.hpp"
#include "backends/common/simd/bf16_fold.hpp"
#include "backends/common/simd/glu_params.hpp"

namespace mxmoe::bf16_amx {

// Packed weights: the 16-row groups of common/group16_layout.hpp (per group and 32-wide K
// block, 256 nibble bytes then the 16 rows' E8M0 scales). The nibbles are 4 chunks of 32
// little-endian words; nibble r (bits 4r..4r+3) of word j of chunk q is element
// 8q + 2r + j%2 of output j/2, i.e. word j of B-tile row 4q + r in TDPBF16PS's [K/2][N][2]
// layout, so one 64-byte load and shifts feed the table lookups of 4 tile rows.
inline constexpr std::size_t kBTileElems = 512;  // one decoded (group, block): 16 x 32 bf16
// Activations are stored as A tiles: per 16 rows (a "row tile") and K block, 16 x 32 bf16
// contiguous (1 KB, one TILELOADD with a 64-byte stride); row tiles are a_tile_stride
// elements apart (blocks x kATileElems).
inline constexpr std::size_t kATileElems = 512;
inline constexpr int kTokensPerStep = 32;  // token rows per gemm call (2 A tiles)
inline constexpr int kDecodeRing = 4;      // B tiles per group decoded in flight

// Whether a scale code can be folded into the bf16 weights exactly (the rule shared with
// avx512_bf16, backends/common/simd/bf16_fold.hpp); a group is folded when all its codes can.
using simd::bf16_scale_foldable;

// LDTILECFG for bf16_amx_tiles_gemm_32x32__amx_bf16 (per thread): A and C tiles of `rows` (1..16)
// rows. A product costs time in proportion to its rows, so a task with fewer than 16 slots
// configures just those (1 token: +11-22% measured); a row's result does not depend on how many
// rows the tile has.
void bf16_amx_tiles_tile_config__amx_bf16(int rows) noexcept;
void bf16_amx_tiles_tile_release__amx_bf16() noexcept;  // TILERELEASE

// One row of 32 * blocks floats to bf16 (f32_to_bf16's bits), into row tiles: element
// 32 b + i goes to row[b * kATileElems + i] (row points at its row inside the first tile).
void bf16_amx_tiles_round_rows__amx_bf16(const float* x, int blocks, std::uint16_t* row) noexcept;

// Decodes `blocks` (group, block) steps into B tiles (blocks x kBTileElems bf16). fold: the
// scales are folded in (all foldable); else the tiles are the unscaled E2M1 values and
// block_scale[16 b + n] = 2^(e - 127) (exact fp32, subnormal for e = 0).
void bf16_amx_tiles_decode_group__amx_bf16(const std::uint8_t* group, int blocks, bool fold,
                                           std::uint16_t* b_tiles, float* block_scale) noexcept;

// The B side of bf16_amx_tiles_gemm_32x32__amx_bf16: two groups of 16 outputs each.
struct GroupPair {
  std::uint16_t* tiles[2] = {nullptr, nullptr};      // decoded B tiles (see packed/ring)
  const float* block_scale[2] = {nullptr, nullptr};  // an unfolded group's 2^(e-127)
  // Both set or both null. Set (only when both groups are foldable): the packed groups,
  // decoded inside the K loop into tiles; else tiles hold all `blocks` tiles already
  // (bf16_amx_tiles_decode_group__amx_bf16).
  const std::uint8_t* packed[2] = {nullptr, nullptr};
  bool fold[2] = {true, true};
  // With packed: tiles are rings of kDecodeRing tiles that stay in L1 (for a single step of
  // slots), else whole-group buffers that later steps re-read (decode once per task).
  bool ring = false;
};

// Two groups (32 outputs) for rows (1..32) token rows: the row tile at a, and for rows > 16
// the one at a + a_tile_stride (every loaded row must be a finite number). The tiles must be
// configured with 16 rows when rows > 16, else with at least `rows`. Writes the configured
// rows of each 16-row half of out[t][0..31] (out_stride floats apart; rows past `rows` are
// garbage). c_scratch: 256 floats, 64-byte aligned. Every path (ring or not, decoded
// here or before) gives the same bits for a row: the same tiles enter the same C sequence.
void bf16_amx_tiles_gemm_32x32__amx_bf16(const GroupPair& pair, int blocks, const std::uint16_t* a,
                                         std::int64_t a_tile_stride, int rows, float* out,
                                         std::int64_t out_stride, float* c_scratch) noexcept;

// h: rows of 64 floats [gate j0..15 | up j0..15 | gate j16..31 | up j16..31] (no bias).
// Row t's 32 results bf16(act(gate_j + gate_bias_j, up_j + up_bias_j)) go to row t % 16 of
// the A tile at a + (t / 16) * a_tile_stride (one K block of the next projection).
void bf16_amx_tiles_glu_to_bf16__amx_bf16(const float* h, int rows, const float* gate_bias,
                                          const float* up_bias, const simd::GluParams& p,
                                          std::uint16_t* a, std::int64_t a_tile_stride) noexcept;

}  // namespace mxmoe::bf16_amx
