// Attention of a decoder: RoPE tables, the KV cache and grouped-query attention over it,
// with gpt-oss's sinks and sliding windows.
//
// Every output row is computed from its own query and its sequence's cache in one fixed
// order (keys in position order, lanes of 8 per dot product: the numerics class attention_dot8
// of backends/dense/attention_kernels.hpp), so its bits never depend on the other rows of the
// step, their number, the thread that computes it or the kernel (AVX-512, AVX2, portable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backends/dense/dense_attention.hpp"
#include "llm/decoder_config.hpp"

namespace mxmoe {
class ThreadPool;
}

namespace mxmoe::llm {

// cos and sin of every (position, frequency) up to a context length, scaled by the rope's
// attention factor, computed as transformers computes them in float32 (inv_freq in float32,
// angle = inv_freq * position in float32).
class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(const RopeConfig& rope, int head_dim, int positions);
  // Rotates the pairs (i, i + head_dim / 2) of HEADS heads of V in place, at POSITION.
  void apply(float* v, int heads, std::int64_t position) const noexcept;
  std::span<const float> inv_freq() const noexcept { return inv_freq_; }
  float attention_factor() const noexcept { return factor_; }

 private:
  int half_ = 0;
  float factor_ = 1;
  std::vector<float> inv_freq_, cos_, sin_;  // cos_/sin_: [positions][half]
};

// The keys and values of every layer, sequence slot and position, in float32:
// [layer][slot][position][kv_head][head_dim]. Allocated once.
class KvCache {
 public:
  KvCache() = default;
  KvCache(int layers, int slots, int context, int kv_heads, int head_dim);
  static std::size_t bytes_for(int layers, int slots, int context, int kv_heads, int head_dim);
  float* key(int layer, int slot, std::int64_t position) noexcept { return at(keys_, layer, slot, position); }
  float* value(int layer, int slot, std::int64_t position) noexcept { return at(values_, layer, slot, position); }
  const float* key(int layer, int slot, std::int64_t position) const noexcept {
    return const_cast<KvCache*>(this)->key(layer, slot, position);
  }
  const float* value(int layer, int slot, std::int64_t position) const noexcept {
    return const_cast<KvCache*>(this)->value(layer, slot, position);
  }
  int context() const noexcept { return context_; }
  int slots() const noexcept { return slots_; }
  std::size_t bytes() const noexcept { return (keys_.size() + values_.size()) * sizeof(float); }

 private:
  float* at(std::vector<float>& v, int layer, int slot, std::int64_t position) noexcept {
    return v.data() + ((static_cast<std::size_t>(layer) * static_cast<std::size_t>(slots_) +
                        static_cast<std::size_t>(slot)) *
                           static_cast<std::size_t>(context_) +
                       static_cast<std::size_t>(position)) *
                          row_;
  }
  int slots_ = 0, context_ = 0;
  std::size_t row_ = 0;  // kv_heads * head_dim
  std::vector<float> keys_, values_;
};

// One query row of a step: its sequence's slot and its position there (the cache holds
// positions [0, position] of that slot when attention runs).
struct QueryRow {
  std::int32_t slot = 0;
  std::int32_t position = 0;
};

struct AttentionShape {
  int heads = 0, kv_heads = 0, head_dim = 0;
  int window = 0;                // 0: full causal attention; else keys with position > q - window
  const float* sinks = nullptr;  // [heads] or null
  float scale = 1.0f;            // on q . k
};

// out[r, h * head_dim ...] = softmax over keys (and the sink) of q . k * scale, times the
// values; q[r] is [heads, head_dim]. A task is one row and one kv head's group of query heads
// (or a part of the group when there are few rows for the pool), so each key and value row is
// read once for the group; KERNELS compute the scores, their softmax (the class's own
// exponential, a 16-lane total) and the weighted values. SCRATCH: per-thread float
// buffers of at least attention_scratch_floats(context, heads / kv_heads) each, pool.size() of
// them.
void attend(const AttentionShape& shape, const dense::AttentionKernels& kernels,
            const KvCache& cache, int layer, std::span<const QueryRow> rows, const float* q,
            float* out, float* scratch, std::size_t scratch_stride, ThreadPool& pool) noexcept;
std::size_t attention_scratch_floats(int context, int group);

}  // namespace mxmoe::llm
