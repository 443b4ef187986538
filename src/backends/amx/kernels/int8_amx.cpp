// AMX int8 kernels: TDPBSSD with K = 32 (one MX block) per tile product, so every block's
// int32 dot product comes out whole and is scaled and accumulated in fp32 with AVX-512 in
// exactly the order and the operations of gemm16_vnni (identical bits).
// GCC 12's AVX-512 intrinsics build "undefined" vectors by self-initialization, which
// -Wuninitialized reports inside the intrinsic headers; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "backends/avx512_vnni/int8_kernels.hpp"

namespace mxmoe::int8_kernels {
namespace {

// Tiles: 0 = A (16 tokens x 32 int8), 1 = B (8 rows x 64 int8: K/4 x 16 outputs x 4),
// 2 = C (16 tokens x 16 int32).
struct alignas(64) TileConfig {
  std::uint8_t palette_id;
  std::uint8_t start_row;
  std::uint8_t reserved[14];
  std::uint16_t colsb[16];
  std::uint8_t rows[16];
};

__m512i signed_doubled_code_table() {
  return _mm512_broadcast_i32x4(
      _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
}

// Same as weight_scales() in int8_vnni.cpp: 2^(e - 128), exact, subnormal for e = 0, 1.
__m512 weight_scales(const std::uint8_t* e8m0) {
  const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e8m0)));
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, one), 23);
  const __m512i subnormal = _mm512_sllv_epi32(one, _mm512_add_epi32(e, _mm512_set1_epi32(21)));
  const __mmask16 tiny = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(tiny, normal, subnormal));
}

}  // namespace

void amx_int8_tile_config() noexcept {
  TileConfig config;
  std::memset(&config, 0, sizeof(config));
  config.palette_id = 1;
  config.rows[0] = 16;
  config.colsb[0] = 32;
  config.rows[1] = 8;
  config.colsb[1] = 64;
  config.rows[2] = 16;
  config.colsb[2] = 64;
  // GCC 12's _tile_loadconfig tells the compiler it reads only 8 bytes of the config, so the
  // stores above are dropped as dead without this barrier (observed: rows/colsb left zero).
  __asm__ volatile("" : : "r"(&config) : "memory");
  _tile_loadconfig(&config);
}

void amx_int8_tile_release() noexcept {
  _tile_release();
}

void amx_decode_group(const std::uint8_t* group, int blocks, std::int8_t* b_tiles,
                      float* weight_scale) noexcept {
  const __m512i table = signed_doubled_code_table();
  const __m512i low_nibble = _mm512_set1_epi8(0x0F);
  for (int b = 0; b < blocks; ++b) {
    const std::uint8_t* gb = group + static_cast<std::size_t>(b) * kGroupBlockBytes;
    std::int8_t* tile = b_tiles + static_cast<std::size_t>(b) * kAmxBTileBytes;
    for (int h = 0; h < 4; ++h) {
      const __m512i packed = _mm512_loadu_si512(gb + 64 * h);
      _mm512_storeu_si512(tile + 128 * h,
                          _mm512_shuffle_epi8(table, _mm512_and_si512(packed, low_nibble)));
      _mm512_storeu_si512(
          tile + 128 * h + 64,
          _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_nibble)));
    }
    _mm512_storeu_ps(weight_scale + 16 * b, weight_scales(gb + kGroupNibbleBytes));
  }
}

void gemm16_amx(const std::int8_t* b_tiles, const float* weight_scale, int blocks,
                const QuantRows& x, int tokens, float* out, std::int64_t out_stride,
                std::int32_t* c_scratch) noexcept {
  for (int t0 = 0; t0 + 16 <= tokens; t0 += 16) {
    __m512 acc[16];
    for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
    const std::int8_t* a_rows = x.q + t0 * x.q_stride;
    const float* d_rows = x.d + t0 * x.s_stride;
    for (int b = 0; b < blocks; ++b) {
      _tile_loadd(0, a_rows + 32 * b, x.q_stride);
      _tile_loadd(1, b_tiles + static_cast<std::size_t>(b) * kAmxBTileBytes, 64);
      _tile_zero(2);
      _tile_dpbssd(2, 0, 1);
      _tile_stored(2, c_scratch, 64);
      const __m512 ws = _mm512_loadu_ps(weight_scale + 16 * b);
      for (int r = 0; r < 16; ++r) {
        const __m512 scale = _mm512_mul_ps(ws, _mm512_set1_ps(d_rows[r * x.s_stride + b]));
        const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(c_scratch + 16 * r));
        acc[r] = _mm512_fmadd_ps(dot, scale, acc[r]);
      }
    }
    for (int r = 0; r < 16; ++r) _mm512_storeu_ps(out + (t0 + r) * out_stride, acc[r]);
  }
}

}  // namespace mxmoe::int8_kernels
