// AVX-512 attention kernels (attention_kernels.hpp for the order they follow: class
// attention_dot8). The scores put two heads in a zmm (head h in the low 8 lanes, h + 1 in the
// high 8) against a key broadcast to both halves, so each lane is still one of dot8's 8 lanes;
// an odd last head and the last keys (fewer than 8) go to the AVX2 kernel. Separate multiplies
// and adds only, but for the softmax's exponential (the FMAs its class defines). Only plain
// functions and file-local helpers live here.
// GCC 12's AVX-512 intrinsics build "undefined" vectors by self-initialization, which
// -Wuninitialized reports inside the intrinsic headers; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "backends/dense/attention_kernels.hpp"
#include "backends/dense/attention_x86.hpp"

namespace mxmoe::dense {
namespace {

constexpr std::int64_t kKeys = 8;

// Heads h and h + 1 (q0, q1) against 8 keys: out0[j], out1[j] for key j; the lane trees of
// attention_x86.hpp on each 256-bit half.
void scores8x2(const float* q0, const float* q1, const float* const* k, int head_dim, __m512 scale,
               float* out0, float* out1) noexcept {
  __m512 acc[kKeys];
  for (auto& a : acc) a = _mm512_setzero_ps();
  int c = 0;  // head_dim >= 8: a do-while keeps the accumulators in registers
  do {
    const __m512 qv = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(q0 + c)),
                                         _mm256_loadu_ps(q1 + c), 1);
    for (std::int64_t j = 0; j < kKeys; ++j)
      acc[j] = _mm512_add_ps(acc[j],
                             _mm512_mul_ps(qv, _mm512_broadcast_f32x8(_mm256_loadu_ps(k[j] + c))));
    c += 8;
  } while (c < head_dim);
  // [h: keys 0..3 | h+1: keys 0..3 | h: keys 4..7 | h+1: keys 4..7], then h's then h+1's.
  const __m512 r = lane_trees<Zmm>(acc);
  const __m512 s = _mm512_mul_ps(_mm512_shuffle_f32x4(r, r, 0xD8), scale);
  _mm256_storeu_ps(out0, _mm512_castps512_ps256(s));
  _mm256_storeu_ps(out1, _mm512_extractf32x8_ps(s, 1));
}

// Values of H heads over D chunks of 16 columns from D0 (the last chunk masked by LAST), for
// keys [p0, p1), added to out.
template <int H, int D>
void values_block(const AttentionValuesCall& c, int h0, int d0, __mmask16 last, std::int64_t p0,
                  std::int64_t p1) noexcept {
  auto mask = [&](int d) -> __mmask16 { return d == D - 1 ? last : __mmask16(0xFFFF); };
  auto out = [&](int h, int d) {
    return c.out + static_cast<std::int64_t>(h0 + h) * c.head_dim + d0 + 16 * d;
  };
  __m512 acc[std::size_t{H}][std::size_t{D}];
  for (int h = 0; h < H; ++h)
    for (int d = 0; d < D; ++d) acc[h][d] = _mm512_maskz_loadu_ps(mask(d), out(h, d));
  for (std::int64_t p = p0; p < p1; ++p) {
    const float* v = c.v + p * c.v_stride + d0;
    __m512 vv[std::size_t{D}];
    for (int d = 0; d < D; ++d) vv[d] = _mm512_maskz_loadu_ps(mask(d), v + 16 * d);
    for (int h = 0; h < H; ++h) {
      const __m512 w = _mm512_set1_ps(c.w[(h0 + h) * c.w_stride + p]);
      for (int d = 0; d < D; ++d) acc[h][d] = _mm512_add_ps(acc[h][d], _mm512_mul_ps(w, vv[d]));
    }
  }
  for (int h = 0; h < H; ++h)
    for (int d = 0; d < D; ++d) _mm512_mask_storeu_ps(out(h, d), mask(d), acc[h][d]);
}

template <int H>
void values_heads(const AttentionValuesCall& c, int h0, std::int64_t p0, std::int64_t p1) noexcept {
  int d = 0;
  for (; d + 64 <= c.head_dim; d += 64) values_block<H, 4>(c, h0, d, 0xFFFF, p0, p1);
  for (; d < c.head_dim; d += 16)
    values_block<H, 1>(c, h0, d, c.head_dim - d >= 16 ? 0xFFFF : 0x00FF, p0, p1);
}

// One head's row: lane l of a zmm is the class's lane l (p = 16 k + l), the tail masked.
void softmax_row(float* s, std::int64_t keys, const float* sink) noexcept {
  const float lowest = -std::numeric_limits<float>::infinity();
  const std::int64_t full = keys / 16 * 16;
  const auto tail = static_cast<__mmask16>((1u << (keys - full)) - 1);
  __m512 mv = _mm512_set1_ps(sink != nullptr ? *sink : lowest);
  for (std::int64_t p = 0; p < full; p += 16) mv = _mm512_max_ps(_mm512_loadu_ps(s + p), mv);
  if (tail != 0)
    mv = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(lowest), tail, s + full), mv);
  const float m = _mm512_reduce_max_ps(mv);
  const __m512 mm = _mm512_set1_ps(m);
  __m512 lanes = _mm512_setzero_ps();
  for (std::int64_t p = 0; p < full; p += 16) {
    const __m512 e = exp_lanes<Zmm>(_mm512_sub_ps(_mm512_loadu_ps(s + p), mm));
    _mm512_storeu_ps(s + p, e);
    lanes = _mm512_add_ps(lanes, e);
  }
  if (tail != 0) {  // the missing lanes add +0: the same bits
    const __m512 e = _mm512_maskz_mov_ps(
        tail, exp_lanes<Zmm>(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, s + full), mm)));
    _mm512_mask_storeu_ps(s + full, tail, e);
    lanes = _mm512_add_ps(lanes, e);
  }
  const __m256 a =
      _mm256_add_ps(_mm512_castps512_ps256(lanes),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lanes), 1)));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  float total = _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
  if (sink != nullptr) total += attention_exp(*sink - m);
  const __m512 inv = _mm512_set1_ps(1.0f / total);
  for (std::int64_t p = 0; p < full; p += 16)
    _mm512_storeu_ps(s + p, _mm512_mul_ps(_mm512_loadu_ps(s + p), inv));
  if (tail != 0)
    _mm512_mask_storeu_ps(s + full, tail,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, s + full), inv));
}

}  // namespace

void attention_dot8_softmax__avx512(const AttentionSoftmaxCall& c) noexcept {
  for (int h = 0; h < c.heads; ++h)
    softmax_row(c.s + h * c.stride, c.keys, c.sinks != nullptr ? c.sinks + h : nullptr);
}

void attention_dot8_scores__avx512(const AttentionScoresCall& c) noexcept {
  const __m512 scale = _mm512_set1_ps(c.scale);
  const int pairs = c.heads / 2;
  const std::int64_t full = c.keys / kKeys * kKeys;
  for (std::int64_t p = 0; p < full; p += kKeys) {
    const float* k[kKeys];
    for (std::int64_t j = 0; j < kKeys; ++j) k[j] = c.k + (p + j) * c.k_stride;
    for (int i = 0; i < pairs; ++i) {
      const int h = 2 * i;
      scores8x2(c.q + static_cast<std::int64_t>(h) * c.head_dim,
                c.q + static_cast<std::int64_t>(h + 1) * c.head_dim, k, c.head_dim, scale,
                c.scores + h * c.scores_stride + p, c.scores + (h + 1) * c.scores_stride + p);
    }
  }
  if (full < c.keys && pairs > 0) {  // the last keys of the paired heads
    AttentionScoresCall rest = c;
    rest.heads = 2 * pairs;
    rest.k = c.k + full * c.k_stride;
    rest.keys = c.keys - full;
    rest.scores = c.scores + full;
    attention_dot8_scores__avx2(rest);
  }
  if (c.heads % 2 != 0) {  // the odd head, every key
    AttentionScoresCall odd = c;
    odd.heads = 1;
    odd.q = c.q + static_cast<std::int64_t>(c.heads - 1) * c.head_dim;
    odd.scores = c.scores + (c.heads - 1) * c.scores_stride;
    attention_dot8_scores__avx2(odd);
  }
}

void attention_dot8_values__avx512(const AttentionValuesCall& c) noexcept {
  values_in_blocks<4>(c, [&](auto heads, int h0, std::int64_t p0, std::int64_t p1) {
    values_heads<decltype(heads)::value>(c, h0, p0, p1);
  });
}

}  // namespace mxmoe::dense
