// AVX2 attention kernels (attention_kernels.hpp for the order they follow: class
// attention_dot8). Compiled with -mavx2 -mfma; the scores and values use separate multiplies
// and adds only (the project builds with -ffp-contract=off), the softmax's exponential the FMAs
// its class defines. Only plain functions and file-local helpers live here.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backends/dense/attention_kernels.hpp"
#include "backends/dense/attention_x86.hpp"

namespace mxmoe::dense {
namespace {

constexpr std::int64_t kKeys = 8;  // keys per scores block (one ymm of results)

// The scores of one head against 8 keys (rows k[0..7]), each dot8 in its lanes, then the 8
// lane trees at once (attention_x86.hpp).
void scores8(const float* q, const float* const* k, int head_dim, __m256 scale,
             float* out) noexcept {
  __m256 acc[kKeys];
  for (auto& a : acc) a = _mm256_setzero_ps();
  int c = 0;  // head_dim >= 8: a do-while keeps the accumulators in registers
  do {
    const __m256 qv = _mm256_loadu_ps(q + c);
    for (std::int64_t j = 0; j < kKeys; ++j)
      acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(qv, _mm256_loadu_ps(k[j] + c)));
    c += 8;
  } while (c < head_dim);
  const __m256 r = lane_trees<Ymm>(acc);
  _mm256_storeu_ps(out, _mm256_mul_ps(r, scale));
}

// Values of H heads over D chunks of 8 columns starting at D0, for keys [p0, p1), added to out.
template <int H, int D>
void values_block(const AttentionValuesCall& c, int h0, int d0, std::int64_t p0,
                  std::int64_t p1) noexcept {
  __m256 acc[std::size_t{H}][std::size_t{D}];
  for (int h = 0; h < H; ++h)
    for (int d = 0; d < D; ++d)
      acc[h][d] =
          _mm256_loadu_ps(c.out + static_cast<std::int64_t>(h0 + h) * c.head_dim + d0 + 8 * d);
  for (std::int64_t p = p0; p < p1; ++p) {
    const float* v = c.v + p * c.v_stride + d0;
    __m256 vv[std::size_t{D}];
    for (int d = 0; d < D; ++d) vv[d] = _mm256_loadu_ps(v + 8 * d);
    for (int h = 0; h < H; ++h) {
      const __m256 w = _mm256_broadcast_ss(c.w + (h0 + h) * c.w_stride + p);
      for (int d = 0; d < D; ++d) acc[h][d] = _mm256_add_ps(acc[h][d], _mm256_mul_ps(w, vv[d]));
    }
  }
  for (int h = 0; h < H; ++h)
    for (int d = 0; d < D; ++d)
      _mm256_storeu_ps(c.out + static_cast<std::int64_t>(h0 + h) * c.head_dim + d0 + 8 * d,
                       acc[h][d]);
}

template <int H>
void values_heads(const AttentionValuesCall& c, int h0, std::int64_t p0, std::int64_t p1) noexcept {
  int d = 0;
  for (; d + 32 <= c.head_dim; d += 32) values_block<H, 4>(c, h0, d, p0, p1);
  for (; d < c.head_dim; d += 8) values_block<H, 1>(c, h0, d, p0, p1);
}

// One head's row: the class's 16 lanes in two ymm (lanes 0-7, 8-15); the last keys (fewer than
// 16) go through a buffer whose missing lanes add +0 (the same bits).
void softmax_row(float* s, std::int64_t keys, const float* sink) noexcept {
  const float lowest = -std::numeric_limits<float>::infinity();
  const std::int64_t full = keys / 16 * 16, rest = keys - full;
  float buf[16];
  std::fill(buf, buf + 16, lowest);
  std::copy(s + full, s + keys, buf);
  __m256 m0 = _mm256_set1_ps(sink != nullptr ? *sink : lowest), m1 = m0;
  for (std::int64_t p = 0; p < full; p += 16) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(s + p), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(s + p + 8), m1);
  }
  m0 = _mm256_max_ps(_mm256_loadu_ps(buf), m0);
  m1 = _mm256_max_ps(_mm256_loadu_ps(buf + 8), m1);
  float mx[8];
  _mm256_storeu_ps(mx, _mm256_max_ps(m0, m1));
  float m = mx[0];
  for (int i = 1; i < 8; ++i) m = mx[i] > m ? mx[i] : m;
  const __m256 mm = _mm256_set1_ps(m);
  __m256 l0 = _mm256_setzero_ps(), l1 = l0;
  for (std::int64_t p = 0; p < full; p += 16) {
    const __m256 e0 = exp_lanes<Ymm>(_mm256_sub_ps(_mm256_loadu_ps(s + p), mm));
    const __m256 e1 = exp_lanes<Ymm>(_mm256_sub_ps(_mm256_loadu_ps(s + p + 8), mm));
    _mm256_storeu_ps(s + p, e0);
    _mm256_storeu_ps(s + p + 8, e1);
    l0 = _mm256_add_ps(l0, e0);
    l1 = _mm256_add_ps(l1, e1);
  }
  if (rest > 0) {
    alignas(32) std::int32_t live[16];
    for (int i = 0; i < 16; ++i) live[i] = i < rest ? -1 : 0;
    const __m256 e0 = _mm256_and_ps(
        _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(live))),
        exp_lanes<Ymm>(_mm256_sub_ps(_mm256_loadu_ps(buf), mm)));
    const __m256 e1 = _mm256_and_ps(
        _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(live + 8))),
        exp_lanes<Ymm>(_mm256_sub_ps(_mm256_loadu_ps(buf + 8), mm)));
    _mm256_storeu_ps(buf, e0);
    _mm256_storeu_ps(buf + 8, e1);
    l0 = _mm256_add_ps(l0, e0);
    l1 = _mm256_add_ps(l1, e1);
  }
  const __m256 a = _mm256_add_ps(l0, l1);
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  float total = _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
  if (sink != nullptr) total += attention_exp(*sink - m);
  const float inv_s = 1.0f / total;
  const __m256 inv = _mm256_set1_ps(inv_s);
  for (std::int64_t p = 0; p < full; p += 8)
    _mm256_storeu_ps(s + p, _mm256_mul_ps(_mm256_loadu_ps(s + p), inv));
  for (std::int64_t i = 0; i < rest; ++i) s[full + i] = buf[i] * inv_s;
}

}  // namespace

void attention_dot8_softmax__avx2(const AttentionSoftmaxCall& c) noexcept {
  for (int h = 0; h < c.heads; ++h)
    softmax_row(c.s + h * c.stride, c.keys, c.sinks != nullptr ? c.sinks + h : nullptr);
}

void attention_dot8_scores__avx2(const AttentionScoresCall& c) noexcept {
  const __m256 scale = _mm256_set1_ps(c.scale);
  for (std::int64_t p = 0; p < c.keys; p += kKeys) {
    const std::int64_t n = std::min(kKeys, c.keys - p);
    const float* k[kKeys];  // past the last key: the last key again (its scores are dropped)
    for (std::int64_t j = 0; j < kKeys; ++j) k[j] = c.k + (p + std::min(j, n - 1)) * c.k_stride;
    for (int h = 0; h < c.heads; ++h) {
      const float* q = c.q + static_cast<std::int64_t>(h) * c.head_dim;
      float* s = c.scores + h * c.scores_stride + p;
      if (n == kKeys) {
        scores8(q, k, c.head_dim, scale, s);
      } else {
        float tail[kKeys];
        scores8(q, k, c.head_dim, scale, tail);
        std::memcpy(s, tail, static_cast<std::size_t>(n) * sizeof(float));
      }
    }
  }
}

void attention_dot8_values__avx2(const AttentionValuesCall& c) noexcept {
  values_in_blocks<2>(c, [&](auto heads, int h0, std::int64_t p0, std::int64_t p1) {
    values_heads<decltype(heads)::value>(c, h0, p0, p1);
  });
}

}  // namespace mxmoe::dense
