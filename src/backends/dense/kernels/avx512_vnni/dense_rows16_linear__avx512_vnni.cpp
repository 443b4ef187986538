// dense_int8_rows16 on AVX-512 VNNI (linear_kernels.hpp for the order), on codes packed as
// rows16_biased: a zmm of one group's block is 16 rows' 4 consecutive codes + 128, so one
// vpdpbusd by a broadcast of 4 activation codes adds 4 products to each row's block sum, and
// the excess 128 * sum(x codes of the block) is removed by starting the sum there (computed
// once per token and block: code_corrections, tiles.hpp). A block of 16 rows then costs 8
// vpdpbusd per token, in two chains, and one conversion, one multiply and one FMA; each zmm of
// weights serves up to 8 tokens. A token tile (up to 8 tokens, quantized by the avx2 set's
// quantizer) sweeps the task's groups, each read from L1/L2 once per tile. Flags of the
// `avx512_vnni` set. dense_int4_rows16 runs the same loop on its nibbles: the low and high nibbles
// of 64 code bytes are two vpdpbusd operands (one vpand, one vpsrlw and one more vpand for the
// pair), the excess is 8 * sum(x codes), and the 16 bf16 scales widen by a shift. GCC 12's AVX-512
// intrinsics build "undefined" vectors by self-initialization, which -Wuninitialized reports inside
// the intrinsic headers; the values are never read.
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

// How each compact class's group block reads: the two vpdpbusd operands of codes 8 c .. 8 c + 7
// (operands(gb, c, ...)), the 16 rows' scales, and the excess of the unsigned codes.
struct Int8Codes {  // dense_int8_rows16 on rows16_biased codes
  static constexpr std::int64_t kBias = 128;
  static void operands(const std::uint8_t* gb, int c, __m512i& w0, __m512i& w1) noexcept {
    w0 = _mm512_loadu_si512(gb + 128 * c);
    w1 = _mm512_loadu_si512(gb + 128 * c + 64);
  }
  static __m512 scales(const std::uint8_t* gb) noexcept {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(gb + kCompactGroupCodeBytes));
  }
};
struct Int4Codes {  // dense_int4_rows16
  static constexpr std::int64_t kBias = kCompact4Bias;
  static void operands(const std::uint8_t* gb, int c, __m512i& w0, __m512i& w1) noexcept {
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    const __m512i w = _mm512_loadu_si512(gb + 64 * c);
    w0 = _mm512_and_si512(w, nibble);
    w1 = _mm512_and_si512(_mm512_srli_epi16(w, 4), nibble);
  }
  static __m512 scales(const std::uint8_t* gb) noexcept {
    const __m256i d =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + kCompact4GroupCodeBytes));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(d), 16));
  }
};

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
template <class Codes, std::size_t T>
void group_tile(const LinearCompactCall& c, const std::uint8_t* group, std::int64_t o, int valid,
                const Prepared& x, std::int64_t tt, std::int64_t t0) noexcept {
  const std::int64_t blocks = x.blocks;
  __m512 acc[T];
  for (std::size_t t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* gb = group + b * c.w.block_bytes;
    prefetch_group_block(gb, c.w.block_bytes);
    __m512i even[T], odd[T];
    for (std::size_t t = 0; t < T; ++t) {
      even[t] = _mm512_set1_epi32(x.corr[(tt + I(t)) * blocks + b]);
      odd[t] = _mm512_setzero_si512();
    }
    for (int k8 = 0; k8 < 4; ++k8) {
      __m512i w0, w1;
      Codes::operands(gb, k8, w0, w1);
      for (std::size_t t = 0; t < T; ++t) {
        const std::int8_t* xb = x.codes + ((tt + I(t)) * blocks + b) * kBlock + 8 * k8;
        even[t] = _mm512_dpbusd_epi32(even[t], w0, broadcast_4_codes(xb));
        odd[t] = _mm512_dpbusd_epi32(odd[t], w1, broadcast_4_codes(xb + 4));
      }
    }
    const __m512 dw = Codes::scales(gb);
    for (std::size_t t = 0; t < T; ++t) {
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x.dx[(tt + I(t)) * blocks + b]));
      acc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(even[t], odd[t])), scale, acc[t]);
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
template <class Codes, std::size_t T>
void group_tiles(const LinearCompactCall& c, const std::uint8_t* group, std::int64_t o, int valid,
                 const Prepared& x, std::int64_t tt, std::int64_t n, std::int64_t t0) noexcept {
  for (; tt + I(T) <= n; tt += I(T)) group_tile<Codes, T>(c, group, o, valid, x, tt, t0);
  if constexpr (T > 1)
    if (tt < n) group_tiles<Codes, T - 1>(c, group, o, valid, x, tt, n, t0);
}

template <class Codes>
void linear_compact(const LinearCompactCall& c, std::int64_t row0, std::int64_t rows) noexcept {
  compact_token_tiles<Codes::kBias>(
      c, &dense_rows16_quantize__avx2,
      [&](const std::int8_t* xq, const float* dx, const std::int32_t* corr, std::int64_t t0,
          std::int64_t n) {
        const Prepared x{xq, dx, corr, c.w.blocks};
        sweep_groups(row0, rows, [&](std::int64_t g, std::int64_t valid) {
          group_tiles<Codes, kCompactTokenTile>(c, c.w.group(g), g * kCompactGroupRows,
                                                static_cast<int>(valid), x, 0, n, t0);
        });
      });
}

}  // namespace

void dense_int8_rows16_linear__avx512_vnni(const LinearCompactCall& c, std::int64_t row0,
                                           std::int64_t rows) noexcept {
  linear_compact<Int8Codes>(c, row0, rows);
}

void dense_int4_rows16_linear__avx512_vnni(const LinearCompactCall& c, std::int64_t row0,
                                           std::int64_t rows) noexcept {
  linear_compact<Int4Codes>(c, row0, rows);
}

}  // namespace mxmoe::dense
