// dense_int8_block32 on AVX-512 VNNI (linear_kernels.hpp for the order), on codes packed as
// vnni_pairs: one zmm is a pair of blocks whose int32 lane 2g + h is group g of block 2p + h,
// the weights stored + 128 (vpdpbusd's unsigned operand). A token's activations are quantized
// by the avx2 set's quantizer, then put in the same lane order, and its correction
// -128 * (sum of each group's 4 codes) is made once per call and token; so a weight pair costs
// one vpdpbusd (from that correction: the exact group sums), one conversion and one FMA per
// token. The scale products dw[b] * dx[b] of 8 pairs are made by one multiply and kept on the
// stack, where each pair's [d0, d1] is one broadcast load (lanes 2g + h take d_h). The lanes
// go back to the class's order (lane 8h + g) before the halving tree.
// Up to 8 tokens are prepared at once (fewer when a row is long: the stack holds what 4 tokens
// of the longest row need), and each tile of 4 rows runs all of them, 4 at a time, while its
// rows are in L1: a row is read from memory once per call at up to 8 tokens. Each tile
// prefetches the rows kCompactAheadRows further on (tiles.hpp). Flags of the `avx512_vnni` set.
// GCC 12's AVX-512 intrinsics build "undefined" vectors by self-initialization, which
// -Wuninitialized reports inside the intrinsic headers; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "backends/dense/lanes16_x86.hpp"

namespace mxmoe::dense {
namespace {

constexpr std::int64_t kChunk = 8;      // pairs per scale multiply
constexpr std::int64_t kRows = 4;       // rows of a tile
constexpr std::int64_t kMaxTokens = 8;  // tokens prepared at once, at most
constexpr std::int64_t kTokenPairs =    // what the stack holds: 4 tokens of the longest row
    kCompactTokenTile * (kCompactMaxIn / 64 + 1);

// Prepared tokens: codes in vnni_pairs order (signed, not offset), each pair's corrections and
// the block scales. Token t's pair p is at t * pairs + p.
struct Tokens {
  alignas(64) std::int8_t codes[kTokenPairs * 64];
  alignas(64) std::int32_t start[kTokenPairs * 16];
  alignas(64) float scales[kTokenPairs * 2];
};

// Tokens t0 .. t0 + n of the call into TK (the class's quantizer, the lane order, corrections).
void prepare(const LinearInt8Call& c, std::int64_t t0, std::int64_t n, Tokens& tk) noexcept {
  const std::int64_t pairs = c.w.pairs();
  const __m512i to_lanes = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  const __m512i bias128 = _mm512_set1_epi8(static_cast<char>(0x80));
  for (std::int64_t t = 0; t < n; ++t) {
    std::int8_t* codes = tk.codes + t * pairs * 64;
    quantize_x_avx2(c.x + (t0 + t) * c.in, c.in, pairs, codes, tk.scales + t * pairs * 2);
    for (std::int64_t p = 0; p < pairs; ++p) {
      const __m512i v = _mm512_permutexvar_epi32(to_lanes, _mm512_load_si512(codes + p * 64));
      _mm512_store_si512(codes + p * 64, v);
      _mm512_store_si512(tk.start + (t * pairs + p) * 16,
                         _mm512_sub_epi32(_mm512_setzero_si512(),
                                          _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias128, v)));
    }
  }
}

// Rows o .. o + R, prepared tokens tt .. tt + T (the call's tokens t0 + tt ..).
template <std::size_t R, std::size_t T>
void tile(const LinearInt8Call& c, const Tokens& tk, std::int64_t tt, std::int64_t o,
          std::int64_t t0) noexcept {
  const std::int64_t pairs = c.w.pairs(), stride = 2 * pairs;
  __m512 acc[R][T];
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  std::int64_t ahead[R];
  for (std::size_t r = 0; r < R; ++r) ahead[r] = ahead_row(c.w, o + I(r));
  alignas(64) double d[R][T][kChunk];  // each is a pair's two f32 scale products
  for (std::int64_t p0 = 0; p0 < pairs; p0 += kChunk) {
    const std::int64_t n = std::min(kChunk, pairs - p0);
    const auto live = static_cast<__mmask16>((1u << (2 * n)) - 1u);
    __m512 dx[T];
    for (std::size_t t = 0; t < T; ++t)
      dx[t] = _mm512_maskz_loadu_ps(live, tk.scales + (tt + I(t)) * stride + 2 * p0);
    for (std::size_t r = 0; r < R; ++r) {
      const __m512 dw = _mm512_maskz_loadu_ps(live, c.w.scales + (o + I(r)) * stride + 2 * p0);
      prefetch_l2(c.w.scales + ahead[r] * stride + 2 * p0);
      for (std::size_t t = 0; t < T; ++t)
        _mm512_store_pd(d[r][t], _mm512_castps_pd(_mm512_mul_ps(dw, dx[t])));
    }
    auto step = [&](std::int64_t i) {
      const std::int64_t p = p0 + i;
      __m512i xv[T], start[T];
      for (std::size_t t = 0; t < T; ++t) {
        xv[t] = _mm512_load_si512(tk.codes + ((tt + I(t)) * pairs + p) * 64);
        start[t] = _mm512_load_si512(tk.start + ((tt + I(t)) * pairs + p) * 16);
      }
      for (std::size_t r = 0; r < R; ++r) {
        const __m512i wu = _mm512_loadu_si512(c.w.codes + ((o + I(r)) * stride + 2 * p) * kBlock);
        prefetch_l2(c.w.codes + (ahead[r] * stride + 2 * p) * kBlock);
        for (std::size_t t = 0; t < T; ++t) {
          const __m512 q = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start[t], wu, xv[t]));
          acc[r][t] = _mm512_fmadd_ps(q, _mm512_castpd_ps(_mm512_set1_pd(d[r][t][i])), acc[r][t]);
        }
      }
    };
    if (n == kChunk) {
      for (std::int64_t i = 0; i < kChunk; ++i) step(i);
    } else {
      for (std::int64_t i = 0; i < n; ++i) step(i);
    }
  }
  const __m512i to_class = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t) {
      store(c.y + (t0 + tt + I(t)) * c.y_stride + o + I(r), c.bias, o + I(r),
            reduce16(_mm512_permutexvar_ps(to_class, acc[r][t])));
    }
}

// Rows o .. o + R for prepared tokens 0 .. n, 4 at a time.
template <std::size_t R>
void rows_tile(const LinearInt8Call& c, const Tokens& tk, std::int64_t n, std::int64_t o,
               std::int64_t t0) noexcept {
  for (std::int64_t tt = 0; tt < n; tt += kCompactTokenTile) {
    switch (std::min<std::int64_t>(kCompactTokenTile, n - tt)) {
      case 1:
        tile<R, 1>(c, tk, tt, o, t0);
        break;
      case 2:
        tile<R, 2>(c, tk, tt, o, t0);
        break;
      case 3:
        tile<R, 3>(c, tk, tt, o, t0);
        break;
      default:
        tile<R, 4>(c, tk, tt, o, t0);
        break;
    }
  }
}

}  // namespace

void linear_int8_avx512_vnni(const LinearInt8Call& c, std::int64_t row0,
                             std::int64_t rows) noexcept {
  Tokens tk;
  const std::int64_t batch = std::min(kMaxTokens, kTokenPairs / c.w.pairs());
  for (std::int64_t t0 = 0; t0 < c.tokens; t0 += batch) {
    const std::int64_t n = std::min(batch, c.tokens - t0);
    prepare(c, t0, n, tk);
    sweep_rows<kRows>(row0, rows, [&](std::int64_t o, auto r) {
      rows_tile<decltype(r)::value>(c, tk, n, o, t0);
    });
  }
}

}  // namespace mxmoe::dense
