// dense_int8_block32 on AVX2 (linear_kernels.hpp for the order): one ymm of int32 is a block's
// 8 groups of 4 products, from vpmaddubsw on |w| and sign(x, w) (no int16 saturation: codes
// are in [-127, 127]) then vpmaddwd by ones; an even block feeds lanes 0-7, an odd one 8-15.
// The scale products dw[b] * dx[b] of 8 blocks are made by one multiply and kept on the stack,
// where each block's is one broadcast load. Each tile prefetches the rows kCompactAheadRows
// further on (tiles.hpp).
// Also the activation quantizer, which the avx512_vnni kernel shares. Flags of the `avx2` set.
#include <immintrin.h>

#include <algorithm>

#include "backends/dense/lanes16_x86.hpp"

namespace mxmoe::dense {
namespace {

constexpr std::int64_t kChunk = 8;  // blocks per scale multiply (even: a block's parity is i's)

// Elements [0, n) of 8 floats, zero past n (n may exceed 8 or be negative).
__m256 load_part(const float* p, std::int64_t n) noexcept {
  if (n >= 8) return _mm256_loadu_ps(p);
  if (n <= 0) return _mm256_setzero_ps();
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane));
}

// One block of `n` values (1..32): its 32 codes and scale (quantize_block32_portable's rule).
float quantize_block(const float* v, std::int64_t n, std::int8_t* codes) noexcept {
  __m256 part[4];
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    part[i] = load_part(v + 8 * i, n - 8 * i);
    amax = _mm256_max_ps(_mm256_and_ps(part[i], abs_mask), amax);  // a NaN gives amax back
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float a = _mm_cvtss_f32(m);
  if (a == 0.0f) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), _mm256_setzero_si256());
    return 0.0f;
  }
  const __m256 inv = _mm256_set1_ps(127.0f / a);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(part[i], inv));
    q[i] =
        _mm256_min_epi32(_mm256_max_epi32(q[i], _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
  }
  const __m256i bytes =
      _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  _mm256_storeu_si256(
      reinterpret_cast<__m256i*>(codes),
      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  return a / 127.0f;
}

template <std::size_t R, std::size_t T>
void tile(const LinearInt8Call& c, const std::int8_t* xq, const float* dx, std::int64_t o,
          std::int64_t t0) noexcept {
  const std::int64_t pairs = c.w.pairs(), stride = 2 * pairs;
  __m256 acc[2][R][T];
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t t = 0; t < T; ++t) acc[h][r][t] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) float d[R][T][kChunk];  // the scale products dw[b] * dx[b] of a chunk of blocks
  std::int64_t ahead[R];
  for (std::size_t r = 0; r < R; ++r) ahead[r] = ahead_row(c.w, o + I(r));
  for (std::int64_t b0 = 0; b0 < stride; b0 += kChunk) {
    const std::int64_t n = std::min(kChunk, stride - b0);
    __m256 dxv[T];
    for (std::size_t t = 0; t < T; ++t) dxv[t] = load_part(dx + I(t) * stride + b0, n);
    for (std::size_t r = 0; r < R; ++r) {
      const __m256 dw = load_part(c.w.scales + (o + I(r)) * stride + b0, n);
      prefetch_l2(c.w.scales + ahead[r] * stride + b0);
      for (std::size_t t = 0; t < T; ++t) _mm256_store_ps(d[r][t], _mm256_mul_ps(dw, dxv[t]));
    }
    auto step = [&](std::int64_t i, auto h) {
      const std::int64_t b = b0 + i;
      __m256i w[R], aw[R];
      for (std::size_t r = 0; r < R; ++r) {
        w[r] = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(c.w.codes + ((o + I(r)) * stride + b) * kBlock));
        aw[r] = _mm256_abs_epi8(w[r]);
        if (h == 0) prefetch_l2(c.w.codes + (ahead[r] * stride + b) * kBlock);  // a pair's line
      }
      for (std::size_t t = 0; t < T; ++t) {
        const __m256i xv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + (I(t) * stride + b) * kBlock));
        for (std::size_t r = 0; r < R; ++r) {
          const __m256i q =
              _mm256_madd_epi16(_mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(xv, w[r])), ones);
          acc[h][r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_broadcast_ss(&d[r][t][i]),
                                         acc[h][r][t]);
        }
      }
    };
    // b0 and the chunk are even: block b0 + i feeds lanes 8 (i mod 2) + g.
    std::int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
      step(i, std::integral_constant<std::size_t, 0>{});
      step(i + 1, std::integral_constant<std::size_t, 1>{});
    }
  }
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t) {
      store(c.y + (t0 + I(t)) * c.y_stride + o + I(r), c.bias, o + I(r),
            reduce16(acc[0][r][t], acc[1][r][t]));
    }
}

template <std::size_t R, std::size_t T>
void sweep(const LinearInt8Call& c, const std::int8_t* xq, const float* dx, std::int64_t row0,
           std::int64_t rows, std::int64_t t0) noexcept {
  sweep_rows<R>(row0, rows,
                [&](std::int64_t o, auto r) { tile<decltype(r)::value, T>(c, xq, dx, o, t0); });
}

}  // namespace

void quantize_x_avx2(const float* x, std::int64_t in, std::int64_t pairs, std::int8_t* codes,
                     float* scales) noexcept {
  for (std::int64_t b = 0; b < 2 * pairs; ++b) {
    if (b * kBlock >= in) {  // the pad block
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + b * kBlock), _mm256_setzero_si256());
      scales[b] = 0.0f;
      continue;
    }
    scales[b] = quantize_block(x + b * kBlock, in - b * kBlock, codes + b * kBlock);
  }
}

void linear_int8_avx2(const LinearInt8Call& c, std::int64_t row0, std::int64_t rows) noexcept {
  compact_token_tiles(c, &quantize_x_avx2,
                      [&](const std::int8_t* xq, const float* dx, std::int64_t t0, std::int64_t n) {
                        switch (n) {
                          case 1:
                            sweep<2, 1>(c, xq, dx, row0, rows, t0);
                            break;
                          case 2:
                            sweep<2, 2>(c, xq, dx, row0, rows, t0);
                            break;
                          case 3:
                            sweep<1, 3>(c, xq, dx, row0, rows, t0);
                            break;
                          default:
                            sweep<1, 4>(c, xq, dx, row0, rows, t0);
                            break;
                        }
                      });
}

}  // namespace mxmoe::dense
