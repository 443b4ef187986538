// dense_int8_rows16 on AVX-512 VNNI (linear_kernels.hpp for the order), on codes packed as
// rows16_biased: a zmm of one group's block is 16 rows' 4 consecutive codes + 128, so one
// vpdpbusd by a broadcast of 4 activation codes adds 4 products to each row's block sum, and
// the excess 128 * sum(x codes of the block) is removed by starting the sum there (computed
// once per token and block, here). A block of 16 rows then costs 8 vpdpbusd per token, in two
// chains, and one conversion, one multiply and one FMA; each zmm of weights serves up to 8
// tokens. A token tile (up to 8 tokens, quantized by the avx2 set's quantizer) sweeps the
// task's groups, each read from L1/L2 once per tile. Flags of the `avx512_vnni` set.
// GCC 12's AVX-512 intrinsics build "undefined" vectors by self-initialization, which
// -Wuninitialized reports inside the intrinsic headers; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "backends/dense/tiles.hpp"

namespace mxmoe::dense {
namespace {

__m512i broadcast_4_codes(const std::int8_t* p) noexcept {
  std::int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

// corr[b] = -128 * (sum of block b's 32 codes), for BLOCKS blocks of one token.
void corrections(const std::int8_t* codes, std::int64_t blocks, std::int32_t* corr) noexcept {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (std::int64_t b = 0; b < blocks; ++b) {
    // sad of (code + 128) against 0: four 64-bit sums of 8 unsigned bytes.
    const __m256i u = _mm256_xor_si256(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + b * kBlock)), flip);
    const __m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    const std::int64_t biased = _mm_cvtsi128_si64(_mm_add_epi64(h, _mm_unpackhi_epi64(h, h)));
    corr[b] = static_cast<std::int32_t>(-128 * (biased - 128 * kBlock));
  }
}

// Prepared tokens of a tile: token t's block b is codes[(t * blocks + b) * 32 ...], its scale
// dx[t * blocks + b] and its correction corr[t * blocks + b].
struct Prepared {
  const std::int8_t* codes;
  const float* dx;
  const std::int32_t* corr;
  std::int64_t blocks;
};

// Group GROUP (its first row O, VALID rows stored) for prepared tokens tt .. tt + T, whose
// outputs go to the call's tokens t0 + tt ...
template <std::size_t T>
void group_tile(const LinearInt8Call& c, const std::uint8_t* group, std::int64_t o, int valid,
                const Prepared& x, std::int64_t tt, std::int64_t t0) noexcept {
  const std::int64_t blocks = x.blocks;
  __m512 acc[T];
  for (std::size_t t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* gb = group + b * kCompactGroupBlockBytes;
    prefetch_group_block(gb);
    __m512i even[T], odd[T];
    for (std::size_t t = 0; t < T; ++t) {
      even[t] = _mm512_set1_epi32(x.corr[(tt + I(t)) * blocks + b]);
      odd[t] = _mm512_setzero_si512();
    }
    for (int k4 = 0; k4 < 8; k4 += 2) {
      const __m512i w0 = _mm512_loadu_si512(gb + 64 * k4);
      const __m512i w1 = _mm512_loadu_si512(gb + 64 * (k4 + 1));
      for (std::size_t t = 0; t < T; ++t) {
        const std::int8_t* xb = x.codes + ((tt + I(t)) * blocks + b) * kBlock + 4 * k4;
        even[t] = _mm512_dpbusd_epi32(even[t], w0, broadcast_4_codes(xb));
        odd[t] = _mm512_dpbusd_epi32(odd[t], w1, broadcast_4_codes(xb + 4));
      }
    }
    const __m512 dw = _mm512_loadu_ps(reinterpret_cast<const float*>(gb + kCompactGroupCodeBytes));
    for (std::size_t t = 0; t < T; ++t) {
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x.dx[(tt + I(t)) * blocks + b]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(even[t], odd[t])), scale,
                               acc[t]);
    }
  }
  const auto rows = static_cast<__mmask16>((1u << valid) - 1u);
  const __m512 bias = c.bias != nullptr ? _mm512_maskz_loadu_ps(rows, c.bias + o) : __m512{};
  for (std::size_t t = 0; t < T; ++t) {
    const __m512 y = c.bias != nullptr ? _mm512_add_ps(acc[t], bias) : acc[t];
    _mm512_mask_storeu_ps(c.y + (t0 + tt + I(t)) * c.y_stride + o, rows, y);
  }
}

// Prepared tokens tt .. n in tiles of T, the rest (fewer than T) as one tile of its own size.
template <std::size_t T>
void group_tiles(const LinearInt8Call& c, const std::uint8_t* group, std::int64_t o, int valid,
                 const Prepared& x, std::int64_t tt, std::int64_t n, std::int64_t t0) noexcept {
  for (; tt + I(T) <= n; tt += I(T)) group_tile<T>(c, group, o, valid, x, tt, t0);
  if constexpr (T > 1)
    if (tt < n) group_tiles<T - 1>(c, group, o, valid, x, tt, n, t0);
}

}  // namespace

void linear_int8_avx512_vnni(const LinearInt8Call& c, std::int64_t row0,
                             std::int64_t rows) noexcept {
  alignas(64) std::int32_t corr[kCompactTokenTile * (kCompactMaxIn / kBlock + 1)];
  compact_token_tiles(c, &quantize_x_avx2,
                      [&](const std::int8_t* xq, const float* dx, std::int64_t t0, std::int64_t n) {
                        const std::int64_t blocks = c.w.blocks;
                        for (std::int64_t t = 0; t < n; ++t)
                          corrections(xq + t * blocks * kBlock, blocks, corr + t * blocks);
                        const Prepared x{xq, dx, corr, blocks};
                        sweep_groups(row0, rows, [&](std::int64_t g, std::int64_t valid) {
                          group_tiles<kCompactTokenTile>(c, c.w.group(g), g * kCompactGroupRows,
                                                         static_cast<int>(valid), x, 0, n, t0);
                        });
                      });
}

}  // namespace mxmoe::dense
