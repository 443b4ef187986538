// RoPE tables, the KV cache and grouped-query attention (attention.hpp).
#include "llm/attention.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "base/thread_pool.hpp"

namespace mxmoe::llm {

namespace {

// YaRN's inverse frequencies (the YaRN paper's ramp between interpolation and
// extrapolation, as transformers' _compute_yarn_parameters computes it, in float32).
std::vector<float> yarn_inv_freq(const RopeConfig& r, int dim, float& factor_out) {
  const int half = dim / 2;
  const double original = r.original_max_positions;
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(original / (rotations * 2 * M_PI))) / (2 * std::log(r.theta));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  std::vector<float> inv(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) {
    const float pos_freq = std::pow(static_cast<float>(r.theta),
                                    static_cast<float>(2 * i) / static_cast<float>(dim));
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (static_cast<float>(r.factor) * pos_freq);
    const float ramp = std::clamp(static_cast<float>((i - low) / (high - low)), 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv[static_cast<std::size_t>(i)] = interpolation * (1.0f - extrapolation_factor) +
                                       extrapolation * extrapolation_factor;
  }
  factor_out = r.attention_factor > 0
                   ? static_cast<float>(r.attention_factor)
                   : (r.factor <= 1 ? 1.0f : static_cast<float>(0.1 * std::log(r.factor) + 1.0));
  return inv;
}

}  // namespace

RopeTable::RopeTable(const RopeConfig& rope, int head_dim, int positions) : half_(head_dim / 2) {
  if (rope.type == "yarn") {
    if (rope.original_max_positions <= 0)
      throw std::invalid_argument("rope: yarn needs original_max_position_embeddings");
    inv_freq_ = yarn_inv_freq(rope, head_dim, factor_);
  } else {
    inv_freq_.resize(static_cast<std::size_t>(half_));
    for (int i = 0; i < half_; ++i)
      inv_freq_[static_cast<std::size_t>(i)] =
          1.0f / std::pow(static_cast<float>(rope.theta),
                          static_cast<float>(2 * i) / static_cast<float>(head_dim));
  }
  const auto n = static_cast<std::size_t>(positions) * static_cast<std::size_t>(half_);
  cos_.resize(n);
  sin_.resize(n);
  for (int p = 0; p < positions; ++p)
    for (int i = 0; i < half_; ++i) {
      const float angle = inv_freq_[static_cast<std::size_t>(i)] * static_cast<float>(p);
      const std::size_t at = static_cast<std::size_t>(p) * static_cast<std::size_t>(half_) +
                             static_cast<std::size_t>(i);
      cos_[at] = std::cos(angle) * factor_;
      sin_[at] = std::sin(angle) * factor_;
    }
}

void RopeTable::apply(float* v, int heads, std::int64_t position) const noexcept {
  const float* c = cos_.data() + position * half_;
  const float* s = sin_.data() + position * half_;
  for (int h = 0; h < heads; ++h) {
    float* x = v + static_cast<std::ptrdiff_t>(h) * 2 * half_;
    for (int i = 0; i < half_; ++i) {
      const float a = x[i], b = x[i + half_];
      x[i] = a * c[i] - b * s[i];
      x[i + half_] = b * c[i] + a * s[i];
    }
  }
}

std::size_t KvCache::bytes_for(int layers, int slots, int context, int kv_heads, int head_dim) {
  return 2 * sizeof(float) * static_cast<std::size_t>(layers) * static_cast<std::size_t>(slots) *
         static_cast<std::size_t>(context) * static_cast<std::size_t>(kv_heads) *
         static_cast<std::size_t>(head_dim);
}

KvCache::KvCache(int layers, int slots, int context, int kv_heads, int head_dim)
    : slots_(slots),
      context_(context),
      row_(static_cast<std::size_t>(kv_heads) * static_cast<std::size_t>(head_dim)) {
  const std::size_t n = bytes_for(layers, slots, context, kv_heads, head_dim) / (2 * sizeof(float));
  keys_.assign(n, 0.0f);
  values_.assign(n, 0.0f);
}

std::size_t attention_scratch_floats(int context, int group) {
  return static_cast<std::size_t>(context) * static_cast<std::size_t>(group) + 16;
}

void attend(const AttentionShape& shape, const dense::AttentionKernels& kernels,
            const KvCache& cache, int layer, std::span<const QueryRow> rows, const float* q,
            float* out, float* scratch, std::size_t scratch_stride, ThreadPool& pool) noexcept {
  const int hd = shape.head_dim, group = shape.heads / shape.kv_heads;
  const std::int64_t q_row = static_cast<std::int64_t>(shape.heads) * hd;
  const std::int64_t kv_row = static_cast<std::int64_t>(shape.kv_heads) * hd;
  // Heads per task: the whole group, halved while there are too few tasks for the pool (a
  // decode step). Each head's bits are the same whatever the heads of its call.
  int per_task = group;
  while (per_task % 2 == 0 &&
         static_cast<std::int64_t>(rows.size()) * (shape.heads / per_task) < 4 * pool.size())
    per_task /= 2;
  const int units = shape.heads / per_task;  // tasks per row
  const std::int64_t tasks = static_cast<std::int64_t>(rows.size()) * units;
  pool.parallel_for(tasks, [&](std::int64_t task, int thread) {
    const std::int64_t r = task / units;
    const int h0 = static_cast<int>(task % units) * per_task, kvh = h0 / group;
    const QueryRow row = rows[static_cast<std::size_t>(r)];
    const std::int32_t first =
        shape.window > 0 ? std::max<std::int32_t>(0, row.position - shape.window + 1) : 0;
    const std::int64_t keys = row.position - first + 1;
    const std::int64_t kv_offset = static_cast<std::int64_t>(kvh) * hd;
    float* scores = scratch + static_cast<std::size_t>(thread) * scratch_stride;
    kernels.scores({.q = q + r * q_row + static_cast<std::int64_t>(h0) * hd, .heads = per_task,
                    .head_dim = hd, .k = cache.key(layer, row.slot, first) + kv_offset,
                    .k_stride = kv_row, .keys = keys, .scale = shape.scale, .scores = scores,
                    .scores_stride = keys});
    kernels.softmax({.s = scores, .stride = keys, .heads = per_task, .keys = keys,
                     .sinks = shape.sinks != nullptr ? shape.sinks + h0 : nullptr});
    kernels.values({.w = scores, .w_stride = keys, .heads = per_task, .head_dim = hd,
                    .v = cache.value(layer, row.slot, first) + kv_offset, .v_stride = kv_row,
                    .keys = keys, .out = out + r * q_row + static_cast<std::int64_t>(h0) * hd});
  });
}

}  // namespace mxmoe::llm
