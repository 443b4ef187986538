// dense_bf16_pairs16 on AVX-512 BF16 (linear_kernels.hpp for the order): one zmm is the 16
// lanes of one (row, token) sum, and one vdpbf16ps adds a step's 32 products to it, two a lane
// in the class's order. The weights are read in place as they are published (bf16 rows, no
// widening); a token tile of x is rounded once (vcvtne2ps2bf16) onto the stack, zero past
// `in`, and reused for every row of the task. Compiled with the flags of the `avx512_bf16` set.
// GCC 12's AVX-512 intrinsics build "undefined" vectors by self-initialization, which
// -Wuninitialized reports inside the intrinsic headers; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "backends/dense/lanes16_x86.hpp"

namespace mxmoe::dense {
namespace {

// A token tile of x in bf16: token t's step j at v + t * stride + 32 j; stride = in rounded up
// to a step, the padding +0 (the class's tail).
struct XTile {
  const std::uint16_t* v;
  std::int64_t stride;
};

// Rounds tokens [t0, t0 + count) of x into dst (count * stride elements).
XTile round_tile(const LinearF32Call& c, std::int64_t t0, std::int64_t count,
                 std::uint16_t* dst) noexcept {
  const std::int64_t stride = (c.in + kBf16Step - 1) / kBf16Step * kBf16Step;
  for (std::int64_t t = 0; t < count; ++t) {
    const float* x = c.x + (t0 + t) * c.in;
    std::uint16_t* out = dst + t * stride;
    for (std::int64_t k = 0; k < stride; k += kBf16Step) {
      const std::int64_t left = c.in - k;
      const auto lo =
          static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << std::max<std::int64_t>(left, 0)) - 1);
      const auto hi = static_cast<__mmask16>(left >= 32   ? 0xFFFF
                                             : left <= 16 ? 0
                                                          : (1u << (left - 16)) - 1);
      const __m512 a = _mm512_maskz_loadu_ps(lo, x + k), b = _mm512_maskz_loadu_ps(hi, x + k + 16);
      _mm512_store_si512(out + k, __builtin_bit_cast(__m512i, _mm512_cvtne2ps_pbh(b, a)));
    }
  }
  return {dst, stride};
}

__m512bh as_bh(__m512i v) noexcept {
  return __builtin_bit_cast(__m512bh, v);
}

// Rows [o, o + R) x the tile's tokens [0, T), whose outputs go to tokens t0.. of y.
template <std::size_t R, std::size_t T>
void tile(const LinearF32Call& c, const XTile& xt, std::int64_t o, std::int64_t t0) noexcept {
  __m512 acc[R][T];
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const auto* w = static_cast<const std::uint16_t*>(c.w) + o * c.in;
  const std::int64_t full = c.in / kBf16Step * kBf16Step;
  for (std::int64_t k = 0; k < full; k += kBf16Step) {
    __m512i wv[R];
    for (std::size_t r = 0; r < R; ++r) wv[r] = _mm512_loadu_si512(w + I(r) * c.in + k);
    for (std::size_t t = 0; t < T; ++t) {
      const __m512bh xv = as_bh(_mm512_load_si512(xt.v + I(t) * xt.stride + k));
      for (std::size_t r = 0; r < R; ++r) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], as_bh(wv[r]), xv);
    }
  }
  if (full < c.in) {  // the weights' tail zero-filled; x's is zero in the tile
    const auto m = static_cast<__mmask32>((std::uint64_t{1} << (c.in - full)) - 1);
    __m512i wv[R];
    for (std::size_t r = 0; r < R; ++r) wv[r] = _mm512_maskz_loadu_epi16(m, w + I(r) * c.in + full);
    for (std::size_t t = 0; t < T; ++t) {
      const __m512bh xv = as_bh(_mm512_load_si512(xt.v + I(t) * xt.stride + full));
      for (std::size_t r = 0; r < R; ++r) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], as_bh(wv[r]), xv);
    }
  }
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t)
      store(c.y + (t0 + I(t)) * c.y_stride + o + I(r), c.bias, o + I(r), reduce16(acc[r][t]));
}

// A token tile of `tokens` (1..8) from t0 over rows [row0, row0 + rows).
void token_tile(const LinearF32Call& c, const XTile& xt, std::int64_t row0, std::int64_t rows,
                std::int64_t t0, std::int64_t tokens) noexcept {
  zmm_sum_tiles(tokens, [&]<std::size_t R, std::size_t T>() {
    sweep_rows<R>(row0, rows,
                  [&](std::int64_t o, auto r) { tile<decltype(r)::value, T>(c, xt, o, t0); });
  });
}

}  // namespace

void dense_bf16_pairs16_linear__avx512_bf16(const LinearF32Call& c, std::int64_t row0,
                                            std::int64_t rows) noexcept {
  alignas(64) std::uint16_t x[kBf16TokenTile * kBf16MaxIn];  // 256 KB; check() keeps in small
  static_assert(kBf16TokenTile >= 8);
  // Up to 8 tokens: one tile, so the weights are read once. More: tiles of 6 tokens (4 x 6
  // registers of sums), each rounded once and swept over all the task's rows: a prefill task
  // is 64 rows (Linear::rows_per_task), whose bf16 weights stay in L2 (at most 512 KB up to
  // in = 4096). Blocking the rows as the f32 kernel does would round every tile once per
  // block: measured, the rounding was then a quarter of the kernel's time.
  if (c.tokens <= 8) return token_tile(c, round_tile(c, 0, c.tokens, x), row0, rows, 0, c.tokens);
  for (std::int64_t t0 = 0; t0 < c.tokens; t0 += 6) {
    const std::int64_t count = std::min<std::int64_t>(6, c.tokens - t0);
    token_tile(c, round_tile(c, t0, count, x), row0, rows, t0, count);
  }
}

}  // namespace mxmoe::dense
