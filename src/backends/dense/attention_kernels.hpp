// The kernels of a decoder's attention (src/llm/attention.cpp calls them): plain data and
// declarations only, so that no inline code is shared with the ISA objects (kernels/<SET>/).
// A call covers HEADS consecutive query heads that share one kv head (a GQA group, or part of
// one), so the ISA kernels read each key and value row once for all of them.
//
// One numerics class, attention_dot8, DEFINED by the portable kernels (attention_portable.cpp);
// every kernel gives the same bits for every (head, key) whatever the number of heads or keys
// of the call, the thread or the ISA:
//   scores: s[h][p] = dot8(q[h], k[p]) * scale, where dot8 has 8 lanes: lane l accumulates
//     acc[l] = acc[l] + (q[i] * k[i]) (the product rounded, then the sum: no FMA) for
//     i = l, l + 8, ... < head_dim in increasing i, from +0; then
//     ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)); then the elements past
//     the last multiple of 8, in order, s = s + q[i] * k[i] (portable only: the ISA kernels
//     need a head_dim that is a positive multiple of 8);
//   values: out[h][d] = +0, then out[h][d] = out[h][d] + (w[h][p] * v[p][d]) for p in
//     increasing order (each d on its own, so any vector width gives the same bits).
// The softmax between them (max, std::exp, the total, w = e / total) is the caller's, in
// portable code, so the exponentials are the C library's on every path.
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

void attention_scores_portable(const AttentionScoresCall&) noexcept;
void attention_values_portable(const AttentionValuesCall&) noexcept;

// x86-64 only (kernels/avx2, kernels/avx512): call them only when MXMOE_X86_KERNELS, with
// head_dim a positive multiple of 8. The avx512 scores kernel calls the avx2 one for an odd head
// and the last keys of a call.
void attention_scores_avx2(const AttentionScoresCall&) noexcept;
void attention_values_avx2(const AttentionValuesCall&) noexcept;
void attention_scores_avx512(const AttentionScoresCall&) noexcept;
void attention_values_avx512(const AttentionValuesCall&) noexcept;

}  // namespace mxmoe::dense
