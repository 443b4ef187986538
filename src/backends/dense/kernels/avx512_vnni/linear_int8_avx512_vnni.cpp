// dense_int8_block32 on AVX-512 VNNI (linear_kernels.hpp for the order): one zmm is a pair of
// blocks, lanes 0-7 the even block's 8 groups of 4 products, 8-15 the odd one's. vpdpbusd
// multiplies unsigned by signed bytes, so the weights go in as w + 128 (a xor) and each
// token's 128 * (sum of its 4 codes) per group, computed once per token and pair, is taken
// off first: the group sums are exact integers, as in every kernel of the class. The
// activations are quantized by the avx2 set's quantizer. Flags of the `avx512_vnni` set.
// GCC 12's AVX-512 intrinsics build "undefined" vectors by self-initialization, which
// -Wuninitialized reports inside the intrinsic headers; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "backends/dense/lanes16_x86.hpp"

namespace mxmoe::dense {
namespace {

// [p[0] x 8, p[1] x 8]: a pair's two scales on the lanes of their blocks.
__m512 pair_scales(const float* p) noexcept {
  const __m512 two =
      _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(p))));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                               two);
}

template <std::size_t R, std::size_t T>
void tile(const LinearInt8Call& c, const std::int8_t* xq, const float* dx, std::int64_t o,
          std::int64_t t0) noexcept {
  const std::int64_t pairs = c.w.pairs(), stride = 2 * pairs;
  __m512 acc[R][T];
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const __m512i bias128 = _mm512_set1_epi8(static_cast<char>(0x80));
  for (std::int64_t p = 0; p < pairs; ++p) {
    __m512i wu[R];
    __m512 dw[R];
    for (std::size_t r = 0; r < R; ++r) {
      wu[r] = _mm512_xor_si512(
          _mm512_loadu_si512(c.w.codes + ((o + I(r)) * stride + 2 * p) * kBlock), bias128);
      dw[r] = pair_scales(c.w.scales + (o + I(r)) * stride + 2 * p);
    }
    for (std::size_t t = 0; t < T; ++t) {
      const __m512i xv = _mm512_loadu_si512(xq + (I(t) * stride + 2 * p) * kBlock);
      const __m512i start = _mm512_sub_epi32(
          _mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias128, xv));
      const __m512 dxv = pair_scales(dx + I(t) * stride + 2 * p);
      for (std::size_t r = 0; r < R; ++r) {
        const __m512i q = _mm512_dpbusd_epi32(start, wu[r], xv);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), _mm512_mul_ps(dw[r], dxv), acc[r][t]);
      }
    }
  }
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t) {
      store(c.y + (t0 + I(t)) * c.y_stride + o + I(r), c.bias, o + I(r), reduce16(acc[r][t]));
    }
}

template <std::size_t R, std::size_t T>
void sweep(const LinearInt8Call& c, const std::int8_t* xq, const float* dx, std::int64_t row0,
           std::int64_t rows, std::int64_t t0) noexcept {
  sweep_rows<R>(row0, rows,
                [&](std::int64_t o, auto r) { tile<decltype(r)::value, T>(c, xq, dx, o, t0); });
}

}  // namespace

void linear_int8_avx512_vnni(const LinearInt8Call& c, std::int64_t row0,
                             std::int64_t rows) noexcept {
  compact_token_tiles(c, &quantize_x_avx2,
                      [&](const std::int8_t* xq, const float* dx, std::int64_t t0, std::int64_t n) {
                        switch (n) {
                          case 1:
                            sweep<4, 1>(c, xq, dx, row0, rows, t0);
                            break;
                          case 2:
                            sweep<4, 2>(c, xq, dx, row0, rows, t0);
                            break;
                          case 3:
                            sweep<2, 3>(c, xq, dx, row0, rows, t0);
                            break;
                          default:
                            sweep<2, 4>(c, xq, dx, row0, rows, t0);
                            break;
                        }
                      });
}

}  // namespace mxmoe::dense
