// AVX2 attention kernels (attention_kernels.hpp for the order they follow: class
// attention_dot8). Compiled with -mavx2 -mfma; separate multiplies and adds only (the project
// builds with -ffp-contract=off, and no FMA intrinsic is used). Only plain functions and
// file-local helpers live here.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

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

}  // namespace

void attention_scores_avx2(const AttentionScoresCall& c) noexcept {
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

void attention_values_avx2(const AttentionValuesCall& c) noexcept {
  values_in_blocks<2>(c, [&](auto heads, int h0, std::int64_t p0, std::int64_t p1) {
    values_heads<decltype(heads)::value>(c, h0, p0, p1);
  });
}

}  // namespace mxmoe::dense
