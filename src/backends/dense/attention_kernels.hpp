// The kernels of a decoder's attention (src/llm/attention.cpp calls them): plain data and
// declarations only, so that no inline code is shared with the ISA objects (kernels/<SET>/).
// A call covers HEADS consecutive query heads that share one kv head (a GQA group, or part of
// one), so the ISA kernels read each key and value row once for all of them.
//
// One numerics class, attention_dot8, DEFINED by the portable kernels
// (attention_dot8__portable.cpp); every kernel gives the same bits for every (head, key) whatever
// the number of heads or keys of the call, the thread or the ISA (a NaN result is NaN in every
// kernel, its payload unspecified: two NaNs meeting keep either one's):
//   scores: s[h][p] = dot8(q[h], k[p]) * scale, where dot8 has 8 lanes: lane l accumulates
//     acc[l] = acc[l] + (q[i] * k[i]) (the product rounded, then the sum: no FMA) for
//     i = l, l + 8, ... < head_dim in increasing i, from +0; then
//     ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)); then the elements past
//     the last multiple of 8, in order, s = s + q[i] * k[i] (portable only: the ISA kernels
//     need a head_dim that is a positive multiple of 8);
//   values: out[h][d] = +0, then out[h][d] = out[h][d] + (w[h][p] * v[p][d]) for p in
//     increasing order (each d on its own, so any vector width gives the same bits).
//   softmax, per head row s[0..n) of scores, with an optional sink logit z:
//     m = the largest of z (or -inf) and every s[p] (NaN scores never win, a NaN sink makes m
//       NaN; the order does not matter: only the sign of a zero m can differ, and x - m then
//       gives the same exp);
//     e[p] = attention_exp(s[p] - m), the function below (each element on its own);
//     16 lanes: lane l = +0, then lane l + e[p] for p = l, l + 16, ... in increasing p; then
//       a[i] = l[i] + l[i + 8], b[i] = a[i] + a[i + 4], c[i] = b[i] + b[i + 2] (i < 8, 4, 2),
//       total = c[0] + c[1]; then total + attention_exp(z - m) with a sink;
//     w[p] = e[p] * (1 / total), written over s.
//   attention_exp(x), for x <= 0 (a softmax's s - m) or NaN: NaN gives x itself; x < -87 gives
//     +0 (e^-87 = 1.6e-38 of the largest weight: below it 2^n would leave the normal range);
//     otherwise n = fma(x, kExpLog2e, kExpRound) - kExpRound (x / ln 2 to the nearest integer,
//     ties to even), r = fma(n, -kExpLn2Lo, fma(n, -kExpLn2Hi, x)) (Cody and Waite), the
//     Taylor polynomial of degree 7 by Horner with fma, p = fma(..fma(fma(1/7!, r, 1/6!), r,
//     1/5!).., r, 1), and p * 2^n (2^n made from its bits). Every step is one correctly
//     rounded operation, so a vector lane and the portable C++ agree bit for bit; within 1
//     ulp of e^x (0.90 ulp at worst, measured over every 61st float of [-87, 0]; tests/llm
//     checks every 127th).
#pragma once

#include <cstdint>

namespace mxmoe::dense {

struct AttentionScoresCall {
  const float* q = nullptr;  // [heads][head_dim]
  int heads = 0;
  int head_dim = 0;
  const float* k = nullptr;  // key p at k + p * k_stride (head_dim floats)
  std::int64_t k_stride = 0;
  std::int64_t keys = 0;
  float scale = 1.0f;
  float* scores = nullptr;  // s[h][p] at scores + h * scores_stride + p
  std::int64_t scores_stride = 0;
};
using AttentionScoresFn = void (*)(const AttentionScoresCall&) noexcept;

struct AttentionValuesCall {
  const float* w = nullptr;  // w[h][p] at w + h * w_stride + p
  std::int64_t w_stride = 0;
  int heads = 0;
  int head_dim = 0;
  const float* v = nullptr;  // value p at v + p * v_stride (head_dim floats)
  std::int64_t v_stride = 0;
  std::int64_t keys = 0;
  float* out = nullptr;  // [heads][head_dim]
};
using AttentionValuesFn = void (*)(const AttentionValuesCall&) noexcept;

struct AttentionSoftmaxCall {
  float* s = nullptr;  // s[h][p] at s + h * stride + p: the scores in, the weights out
  std::int64_t stride = 0;
  int heads = 0;
  std::int64_t keys = 0;         // at least 1
  const float* sinks = nullptr;  // sinks[h], head h's sink logit, or nullptr (none)
};
using AttentionSoftmaxFn = void (*)(const AttentionSoftmaxCall&) noexcept;

// attention_exp's constants (plain data: every kernel reads the same values).
inline constexpr float kExpLog2e = 1.44269504088896341f;
inline constexpr float kExpRound = 12582912.0f;      // 1.5 * 2^23: fma rounds to an integer here
inline constexpr float kExpLn2Hi = 0.693359375f;     // 355 / 512: n * kExpLn2Hi is exact
inline constexpr float kExpLn2Lo = -2.12194440e-4f;  // ln 2 - kExpLn2Hi
inline constexpr float kExpMin = -87.0f;
inline constexpr float kExpTaylor[8] = {1.0f,      1.0f,       1.0f / 2,   1.0f / 6,
                                        1.0f / 24, 1.0f / 120, 1.0f / 720, 1.0f / 5040};

void attention_dot8_scores__portable(const AttentionScoresCall&) noexcept;
void attention_dot8_values__portable(const AttentionValuesCall&) noexcept;
void attention_dot8_softmax__portable(const AttentionSoftmaxCall&) noexcept;
// The class's exponential (above), the definition every kernel's lanes follow.
float attention_exp(float x) noexcept;

// x86-64 only (kernels/avx2, kernels/avx512): call them only when MXMOE_X86_KERNELS, with
// head_dim a positive multiple of 8. The avx512 scores kernel calls the avx2 one for an odd head
// and the last keys of a call.
void attention_dot8_scores__avx2(const AttentionScoresCall&) noexcept;
void attention_dot8_values__avx2(const AttentionValuesCall&) noexcept;
void attention_dot8_scores__avx512(const AttentionScoresCall&) noexcept;
void attention_dot8_values__avx512(const AttentionValuesCall&) noexcept;
void attention_dot8_softmax__avx2(const AttentionSoftmaxCall&) noexcept;
void attention_dot8_softmax__avx512(const AttentionSoftmaxCall&) noexcept;

}  // namespace mxmoe::dense
