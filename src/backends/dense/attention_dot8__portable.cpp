// The portable attention kernels: they DEFINE the numerics class attention_dot8
// (attention_kernels.hpp); the ISA kernels are checked against their bits (tests/llm).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/dense/attention_kernels.hpp"

namespace mxmoe::dense {

namespace {

float dot8(const float* a, const float* b, std::int64_t n) noexcept {
  float acc[8] = {};
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[k + l] * b[k + l];
  float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  for (; k < n; ++k) s += a[k] * b[k];
  return s;
}

}  // namespace

float attention_exp(float x) noexcept {
  if (std::isnan(x)) return x;
  if (x < kExpMin) return 0.0f;
  const float n = std::fma(x, kExpLog2e, kExpRound) - kExpRound;
  const float r = std::fma(n, -kExpLn2Lo, std::fma(n, -kExpLn2Hi, x));
  float p = kExpTaylor[7];
  for (int i = 6; i >= 0; --i) p = std::fma(p, r, kExpTaylor[i]);
  const auto bits = static_cast<std::uint32_t>(static_cast<int>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

void attention_dot8_softmax__portable(const AttentionSoftmaxCall& c) noexcept {
  for (int h = 0; h < c.heads; ++h) {
    float* s = c.s + h * c.stride;
    float m = c.sinks != nullptr ? c.sinks[h] : -std::numeric_limits<float>::infinity();
    for (std::int64_t p = 0; p < c.keys; ++p) m = s[p] > m ? s[p] : m;
    float lane[16] = {};
    for (std::int64_t p = 0; p < c.keys; ++p) {
      s[p] = attention_exp(s[p] - m);
      lane[p % 16] += s[p];
    }
    for (int w = 8; w >= 1; w /= 2)
      for (int i = 0; i < w; ++i) lane[i] += lane[i + w];
    float total = lane[0];
    if (c.sinks != nullptr) total += attention_exp(c.sinks[h] - m);
    const float inv = 1.0f / total;
    for (std::int64_t p = 0; p < c.keys; ++p) s[p] *= inv;
  }
}

void attention_dot8_scores__portable(const AttentionScoresCall& c) noexcept {
  for (int h = 0; h < c.heads; ++h) {
    const float* q = c.q + static_cast<std::int64_t>(h) * c.head_dim;
    float* s = c.scores + h * c.scores_stride;
    for (std::int64_t p = 0; p < c.keys; ++p)
      s[p] = dot8(q, c.k + p * c.k_stride, c.head_dim) * c.scale;
  }
}

void attention_dot8_values__portable(const AttentionValuesCall& c) noexcept {
  for (int h = 0; h < c.heads; ++h) {
    float* o = c.out + static_cast<std::int64_t>(h) * c.head_dim;
    const float* w = c.w + h * c.w_stride;
    std::fill(o, o + c.head_dim, 0.0f);
    for (std::int64_t p = 0; p < c.keys; ++p) {
      const float* v = c.v + p * c.v_stride;
      for (int d = 0; d < c.head_dim; ++d) o[d] += w[p] * v[d];
    }
  }
}

}  // namespace mxmoe::dense
