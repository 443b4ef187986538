// AMX int8 kernels: TDPBSSD with K = 32 (one MX block) per tile product, so every block's
// int32 dot product comes out whole and is scaled and accumulated in fp32 with AVX-512 in
// exactly the order and the operations of int8_block32_gemm_16x8__avx512_vnni (identical bits).
// GCC 12's AVX-512 intrinsics build "undefined" vectors by self-initialization, which
// -Wuninitialized reports inside the intrinsic headers; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backends/common/amx/tile_config.hpp"
#include "backends/integer/int8_kernels.hpp"
#include "backends/integer/kernels/int8_zmm.hpp"

namespace mxmoe::int8_kernels {
namespace {

// Tiles, two of each so consecutive blocks use different registers (tiles are not renamed):
// 0, 1 = A (16 tokens x 32 int8), 2, 3 = B (8 rows x 64 int8: K/4 x 16 outputs x 4),
// 4, 5 = C (16 tokens x 16 int32).
constexpr amx_tiles::TileShape kTiles[6] = {{16, 32}, {16, 32}, {8, 64},
                                            {8, 64},  {16, 64}, {16, 64}};

__m512i signed_doubled_code_table() {
  return _mm512_broadcast_i32x4(
      _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
}

// One 16 x 16 x 32 tile product into C tile kC, and its store as 16 rows of 16 int32. The tile
// intrinsics paste their register numbers into the assembly text, so they must be literals:
// one pair of functions per (A, B, C) register triple.
#define MXMOE_DEFINE_TILE_PRODUCT(suffix, kA, kB, kC)                               \
  __attribute__((always_inline)) inline void tile_product_##suffix(                 \
      const std::int8_t* a, std::int64_t a_stride, const std::int8_t* b_tile) {     \
    _tile_loadd(kA, a, a_stride);                                                   \
    _tile_loadd(kB, b_tile, 64);                                                    \
    _tile_zero(kC);                                                                 \
    _tile_dpbssd(kC, kA, kB);                                                       \
  }                                                                                 \
  __attribute__((always_inline)) inline void tile_store_##suffix(std::int32_t* c) { \
    _tile_stored(kC, c, 64);                                                        \
  }
MXMOE_DEFINE_TILE_PRODUCT(even, 0, 2, 4)
MXMOE_DEFINE_TILE_PRODUCT(odd, 1, 3, 5)
#undef MXMOE_DEFINE_TILE_PRODUCT

// acc[r] = fma(float(c[r][:]), ws * d_r, acc[r]) for the 16 token rows: cvt (from memory),
// multiply (activation scale broadcast from memory) and FMA, 3 vector uops per row.
__attribute__((always_inline)) inline void accumulate_block(const std::int32_t* c,
                                                            const float* weight_scale,
                                                            const float* d, std::int64_t d_stride,
                                                            __m512 (&acc)[16]) {
  const __m512 ws = _mm512_loadu_ps(weight_scale);
  for (int r = 0; r < 16; ++r) {
    const __m512 scale = _mm512_mul_ps(ws, _mm512_set1_ps(d[r * d_stride]));
    const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * r));
    acc[r] = _mm512_fmadd_ps(dot, scale, acc[r]);
  }
}

}  // namespace

void int8_block32_tile_config__amx_int8() noexcept {
  amx_tiles::load_tile_config(kTiles, 6);
}

void int8_block32_tile_release__amx_int8() noexcept {
  _tile_release();
}

void int8_block32_decode_group__amx_int8(const std::uint8_t* group, int blocks,
                                         std::int8_t* b_tiles, float* weight_scale) noexcept {
  const __m512i table = signed_doubled_code_table();
  const __m512i low_nibble = _mm512_set1_epi8(0x0F);
  for (int b = 0; b < blocks; ++b) {
    const std::uint8_t* gb = group + static_cast<std::size_t>(b) * group16::kBlockBytes;
    std::int8_t* tile = b_tiles + static_cast<std::size_t>(b) * kAmxBTileBytes;
    for (int h = 0; h < 4; ++h) {
      const __m512i packed = _mm512_loadu_si512(gb + 64 * h);
      _mm512_storeu_si512(tile + 128 * h,
                          _mm512_shuffle_epi8(table, _mm512_and_si512(packed, low_nibble)));
      _mm512_storeu_si512(
          tile + 128 * h + 64,
          _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_nibble)));
    }
    _mm512_storeu_ps(weight_scale + 16 * b, weight_scales(gb + group16::kNibbleBytes));
  }
}

void int8_block32_gemm_16x16__amx_int8(const std::int8_t* b_tiles, const float* weight_scale,
                                       int blocks, const QuantRows& x, int tokens, float* out,
                                       std::int64_t out_stride, std::int32_t* c_scratch) noexcept {
  std::int32_t* const c_even = c_scratch;
  std::int32_t* const c_odd = c_scratch + 256;
  for (int t0 = 0; t0 < tokens; t0 += 16) {
    __m512 acc[16];
    for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
    const std::int8_t* a_rows = x.q + t0 * x.q_stride;
    const float* d_rows = x.d + t0 * x.s_stride;
    auto b_tile = [&](int b) { return b_tiles + static_cast<std::size_t>(b) * kAmxBTileBytes; };
    auto accumulate = [&](int b, const std::int32_t* c) {
      accumulate_block(c, weight_scale + 16 * b, d_rows + b, x.s_stride, acc);
    };
    // Software pipeline, two tile products in flight: block b's C tile is stored, block b+2's
    // product is issued into that same tile (it waits only for the store to read it), then
    // block b's fp32 epilogue runs while TDPBSSD works on blocks b+1 and b+2. So each
    // TILESTORED finds its product finished two epilogues earlier (measured: a TILESTORED
    // right behind its TDPBSSD stalls the core). The epilogues still run in block order
    // 0, 1, 2, ... (the bits depend on it).
    auto a_block = [&](int b) { return a_rows + 32 * b; };
    tile_product_even(a_block(0), x.q_stride, b_tile(0));
    if (blocks > 1) tile_product_odd(a_block(1), x.q_stride, b_tile(1));
    for (int b = 0; b < blocks; b += 2) {
      tile_store_even(c_even);
      if (b + 2 < blocks) tile_product_even(a_block(b + 2), x.q_stride, b_tile(b + 2));
      accumulate(b, c_even);
      if (b + 1 < blocks) {
        tile_store_odd(c_odd);
        if (b + 3 < blocks) tile_product_odd(a_block(b + 3), x.q_stride, b_tile(b + 3));
        accumulate(b + 1, c_odd);
      }
    }
    const int valid = tokens - t0 < 16 ? tokens - t0 : 16;
    for (int r = 0; r < valid; ++r) _mm512_storeu_ps(out + (t0 + r) * out_stride, acc[r]);
  }
}

}  // namespace mxmoe::int8_kernels
