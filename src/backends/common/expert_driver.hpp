// The skeleton the MXFP4 expert drivers (integer/, amx_bf16/, float/) are built on (dense_expert
// takes only its alignment). A driver is portable code: it packs the weights once, and
// ExpertKernel::run() is phases of ThreadPool tasks that call the family's ISA kernels through
// the table of plain functions its backend bound (docs/ARCHITECTURE.md, "Binding kernels").
// What the phases share is here:
//   - the workspace layout: consecutive 64-byte-aligned regions, then one region per thread;
//   - the (expert, tile) task loop over the experts that received slots (ExpertTasks order);
//   - the last phase's store: a tile's results + bias into the slots' output rows;
//   - the expert nonlinearity as the ISA kernels' plain data.
// None of it decides a bit: a slot's results come from the same kernel calls in the same
// order whichever thread runs its task.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/common/expert_tasks.hpp"
#include "backends/common/simd/glu_params.hpp"
#include "backends/kernel.hpp"
#include "base/thread_pool.hpp"
#include "mxmoe/layer_spec.hpp"

namespace mxmoe::driver {

inline constexpr std::size_t kAlign = 64;  // ExpertForward::workspace's alignment

constexpr std::size_t align_up(std::size_t n) noexcept {
  return (n + kAlign - 1) / kAlign * kAlign;
}

// Byte offsets of consecutive regions, each starting 64-byte aligned: at = carve.take(bytes).
struct Carve {
  std::size_t end = 0;
  std::size_t take(std::size_t bytes) noexcept {
    const std::size_t at = end;
    end += align_up(bytes);
    return at;
  }
};

// The shared regions (`shared` bytes) then one region of `per_thread` bytes per thread.
struct ThreadRegions {
  std::size_t base = 0, per_thread = 0;
  std::size_t total(int threads) const noexcept {
    return base + per_thread * static_cast<std::size_t>(threads > 1 ? threads : 1);
  }
  std::byte* of(std::byte* workspace, int thread) const noexcept {
    return workspace + base + per_thread * static_cast<std::size_t>(thread);
  }
};

// Runs body(local expert, tile, first position, slot count, thread) on the pool for every
// (expert, tile) of the batch's experts that received slots, tiles_per_expert tiles each,
// numbered as ExpertTasks numbers them (slots_per_pass: the slots one pass of a tile takes).
template <class Body>
void for_each_expert_tile(const ExpertForward& f, std::int64_t tiles_per_expert,
                          std::int64_t slots_per_pass, Body&& body) {
  const ExpertBatch& batch = f.batch;
  const std::int32_t* offsets = batch.expert_offsets;
  const ExpertTasks tasks(batch.num_experts, tiles_per_expert, offsets[batch.num_experts],
                          slots_per_pass);
  f.pool->parallel_for(tasks.count(), [&](std::int64_t task, int thread) {
    const ExpertTasks::Task t = tasks(task);
    const std::int64_t first = offsets[t.expert], count = offsets[t.expert + 1] - first;
    if (count > 0) body(t.expert, t.tile, first, count, thread);
  });
}

// The last phase's store for `rows` consecutive positions from `first` (in expert order): row
// r's result o (o < width) is acc[r * row_stride + o * col_stride]; it goes, + bias[o] (+0.0f
// without a bias, as every driver always did), to column col0 + o of its slot's output row.
inline void store_plus_bias(const ExpertForward& f, std::int64_t first, int rows, const float* acc,
                            std::int64_t row_stride, std::int64_t col_stride, int width,
                            const float* bias, std::int64_t hidden, std::int64_t col0) noexcept {
  for (int r = 0; r < rows; ++r) {
    float* dst = f.slot_out + f.batch.order[first + r] * hidden + col0;
    const float* src = acc + r * row_stride;
    for (int o = 0; o < width; ++o)
      dst[o] = src[o * col_stride] + (bias != nullptr ? bias[o] : 0.0f);
  }
}

// The layer's expert nonlinearity as GluParams (the ISA kernels take no mxmoe types).
inline simd::GluParams glu_params(const LayerSpec& spec) noexcept {
  simd::GluParams p;
  p.fn = spec.activation == ActivationFn::swiglu_oai ? simd::kGluSwigluOai
         : spec.activation == ActivationFn::silu_glu ? simd::kGluSilu
                                                     : simd::kGluSiluClamp;
  p.alpha = spec.activation_params.alpha;
  p.limit = spec.activation_params.limit;
  return p;
}

}  // namespace mxmoe::driver
