#include "backends/float/strip_kernel.hpp"

#include <algorithm>
#include <stdexcept>

#include "backends/common/expert_driver.hpp"
#include "backends/common/simd/bf16_fold.hpp"
#include "base/huge_pages.hpp"
#include "base/thread_pool.hpp"
#include "format/activation_rounding.hpp"
#include "model/activation.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe::strip {
namespace {

using driver::align_up;
using driver::kAlign;
constexpr int kMaxTokensCap = 8;            // dot() token tile upper bound (stack arrays)
constexpr std::int64_t kStripsPerTask = 8;  // 32 rows: ~50 KB of weights per task at K=2880

std::int64_t source_row(RowMap map, std::int64_t rows, std::int64_t s, int n) noexcept {
  const std::int64_t i = 2 * s + n / 2;  // gate/up maps: intermediate index
  switch (map) {
    case RowMap::identity:
    case RowMap::gate_up_interleaved:  // gate 2i, up 2i+1: strip s is rows 4s..4s+3
      return kStripRows * s + n;
    case RowMap::gate_up_halves:
      return (n % 2) * (rows / 2) + i;
  }
  return 0;
}

// Element i (0..31) of a 16-byte MXFP4 block in the gpt-oss nibble order.
std::uint8_t nibble(const std::uint8_t* block, int i) noexcept {
  return static_cast<std::uint8_t>((block[i / 2] >> (4 * (i % 2))) & 0x0F);
}

void pack_step(const std::uint8_t* const src[kStripRows], NibbleOrder order,
               std::uint8_t* dst) noexcept {
  if (order == NibbleOrder::row_blocks) {
    for (int n = 0; n < kStripRows; ++n)
      for (int j = 0; j < 16; ++j)
        dst[16 * n + j] =
            static_cast<std::uint8_t>(nibble(src[n], j) | (nibble(src[n], j + 16) << 4));
    return;
  }
  for (int j = 0; j < kBlockElems; ++j) {
    dst[2 * j] = static_cast<std::uint8_t>(nibble(src[0], j) | (nibble(src[1], j) << 4));
    dst[2 * j + 1] = static_cast<std::uint8_t>(nibble(src[2], j) | (nibble(src[3], j) << 4));
  }
}

// Asks for a strip's nibbles and scales ahead of their use (into L2: they are read once, by
// the decode, which may come a whole strip's dot products later).
void prefetch_strip(const PackedStrip& strip) noexcept {
  const auto k = static_cast<std::size_t>(strip.kblocks);
  for (std::size_t b = 0; b < k * kStepNibbleBytes; b += 64) __builtin_prefetch(strip.nibbles + b, 0, 2);
  for (std::size_t b = 0; b < k * kStripRows; b += 64) __builtin_prefetch(strip.scales + b, 0, 2);
}

}  // namespace

std::size_t PackedProjection::bytes() const noexcept {
  return static_cast<std::size_t>(experts * strips) * strip_stride + scales.size() +
         bias.size() * sizeof(float);
}

PackedStrip PackedProjection::strip(std::int64_t expert, std::int64_t s) const noexcept {
  const std::size_t index = static_cast<std::size_t>(expert * strips + s);
  const auto* p = reinterpret_cast<const std::uint8_t*>(base + index * strip_stride);
  const auto k = static_cast<std::size_t>(kblocks);
  return PackedStrip{.nibbles = p,
                     .scales = scales.data() + index * k * kStripRows,
                     .kblocks = kblocks,
                     .scale_outside = scale_outside[index] != 0};
}

PackedProjection pack_projection(const Mxfp4View& w, const DenseView& bias, RowMap map,
                                 NibbleOrder order, bool bf16_decode) {
  if (w.rows % kStripRows != 0 || w.cols % kBlockElems != 0)
    throw std::invalid_argument("MXFP4 projection rows must be a multiple of 4, cols of 32");
  PackedProjection p;
  p.experts = w.experts;
  p.strips = w.rows / kStripRows;
  p.kblocks = w.cols / kBlockElems;
  const auto k = static_cast<std::size_t>(p.kblocks);
  p.strip_stride = k * kStepNibbleBytes;
  const auto strip_count = static_cast<std::size_t>(p.experts * p.strips);
  p.storage = std::make_unique_for_overwrite<std::byte[]>(strip_count * p.strip_stride + kAlign);
  const auto address = reinterpret_cast<std::uintptr_t>(p.storage.get());
  p.base = p.storage.get() + (align_up(address) - address);
  advise_huge_pages(p.base, strip_count * p.strip_stride);
  p.scale_outside.assign(strip_count, 0);
  p.scales.resize(strip_count * k * kStripRows);
  if (!bias.empty()) p.bias.resize(strip_count * kStripRows);

  for (std::int64_t e = 0; e < p.experts; ++e) {
    for (std::int64_t s = 0; s < p.strips; ++s) {
      const std::size_t index = static_cast<std::size_t>(e * p.strips + s);
      auto* nibbles = reinterpret_cast<std::uint8_t*>(p.base + index * p.strip_stride);
      std::uint8_t* scales = p.scales.data() + index * k * kStripRows;
      std::int64_t rows[kStripRows];
      for (int n = 0; n < kStripRows; ++n) {
        rows[n] = source_row(map, w.rows, s, n);
        if (!bias.empty())
          p.bias[index * kStripRows + static_cast<std::size_t>(n)] = bias.at(e * w.rows + rows[n]);
      }
      bool outside = false;
      for (std::size_t kb = 0; kb < k; ++kb) {
        const std::uint8_t* src[kStripRows];
        for (int n = 0; n < kStripRows; ++n) {
          src[n] = w.row_blocks(e, rows[n]) + kb * kMxfp4BlockBytes;
          const std::uint8_t code = w.row_scale(e, rows[n])[kb];
          scales[kb * kStripRows + static_cast<std::size_t>(n)] = code;
          outside = outside || (bf16_decode && !simd::bf16_scale_foldable(code));
        }
        pack_step(src, order, nibbles + kb * kStepNibbleBytes);
      }
      p.scale_outside[index] = outside ? 1 : 0;
    }
  }
  return p;
}

// Byte offsets into the workspace: rounded inputs [M, H], rounded activations [M*k, I]
// (indexed by slot), for a block format (mxfp8) the unrounded activations [M*k, I] float,
// then per thread a decoded strip, a dot-product tile and the rounding scratch.
struct StripKernel::Layout {
  std::size_t xq = 0, a = 0, a_f32 = 0;
  driver::ThreadRegions threads;
  std::size_t decoded = 0, tile = 0, rounding = 0;  // inside a thread's region
};

StripKernel::StripKernel(const Deployment& d, const LayerWeights& w, const StripOps& ops)
    : spec_(d.layer),
      format_(d.request.activation.value_or(ActivationFormat::f32)),
      ops_(ops),
      w1_(pack_projection(w.w1, w.b1,
                          d.layer.gate_up_layout == GateUpLayout::interleaved
                              ? RowMap::gate_up_interleaved
                              : RowMap::gate_up_halves,
                          ops.order, ops.element_bytes == 2)),
      w2_(pack_projection(w.w2, w.b2, RowMap::identity, ops.order, ops.element_bytes == 2)) {
  if (ops.max_tokens < 1 || ops.max_tokens > kMaxTokensCap)
    throw std::invalid_argument("StripOps::max_tokens out of range");
  if (ops.element_bytes == 4 && format_ != ActivationFormat::f32 &&
      format_ != ActivationFormat::bf16)
    throw std::invalid_argument("float strip kernels implement f32 and bf16 activations only");
  if (ops.element_bytes == 2 && format_ != ActivationFormat::bf16 &&
      format_ != ActivationFormat::mxfp8)
    throw std::invalid_argument("bf16 strip kernels need bf16 or mxfp8 activations");
}

StripKernel::Layout StripKernel::layout(std::int64_t rows, std::int64_t slots) const noexcept {
  const auto m = static_cast<std::size_t>(rows);
  const auto eb = ops_.element_bytes;
  const auto kb = static_cast<std::size_t>(std::max(w1_.kblocks, w2_.kblocks));
  const auto s = static_cast<std::size_t>(slots);
  const auto hidden = static_cast<std::size_t>(spec_.hidden);
  const auto inter = static_cast<std::size_t>(spec_.intermediate);
  const bool block_format = format_ == ActivationFormat::mxfp8;
  Layout l;
  driver::Carve shared;
  l.xq = shared.take(m * hidden * eb);
  l.a = shared.take(s * inter * eb);
  l.a_f32 = shared.take(block_format ? s * inter * sizeof(float) : 0);
  driver::Carve thread;
  l.decoded = thread.take(kb * kStripRows * (kBlockElems * eb + sizeof(float)));
  l.tile = thread.take(kStripRows * kMaxTokensCap * sizeof(float));
  l.rounding = thread.take(block_format ? rounding_bf16_scratch_bytes(std::max(hidden, inter)) : 0);
  l.threads = {.base = shared.end, .per_thread = thread.end};
  return l;
}

std::size_t StripKernel::workspace_bytes(std::int64_t rows, std::int64_t slots,
                                         int threads) const noexcept {
  return layout(rows, slots).threads.total(threads);
}

std::size_t StripKernel::packed_bytes() const noexcept {
  return w1_.bytes() + w2_.bytes();
}

void StripKernel::run(const ExpertForward& f) const noexcept {
  const ExpertBatch& batch = f.batch;
  const Layout l = layout(f.rows, batch.slots);
  const std::int64_t hidden = spec_.hidden, inter = spec_.intermediate;
  const std::size_t eb = ops_.element_bytes;
  const bool round_bf16 = format_ == ActivationFormat::bf16;
  // mxfp8 rounds 32-element blocks: x row by row, and the activations once a slot's whole row
  // is computed (GEMM1 produces it strip by strip), into the bf16 inputs of the kernels.
  const bool block_format = format_ == ActivationFormat::mxfp8;
  std::byte* xq = f.workspace + l.xq;
  std::byte* a = f.workspace + l.a;
  auto* a_f32 = reinterpret_cast<float*>(f.workspace + l.a_f32);
  const auto thread_scratch = [&](int thread) { return l.threads.of(f.workspace, thread); };

  // Stores v rounded to the activation format in the element type of the kernels.
  const auto store = [&](std::byte* base, std::int64_t index, float v) {
    if (eb == 2) {
      reinterpret_cast<std::uint16_t*>(base)[index] = f32_to_bf16(v);
    } else {
      reinterpret_cast<float*>(base)[index] = round_bf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
    }
  };

  // 1. Each input row rounded once, shared by its slots (f32 in float: used as is).
  const bool x_as_is = eb == 4 && !round_bf16;
  const auto hn = static_cast<std::size_t>(hidden), in = static_cast<std::size_t>(inter);
  if (block_format) {
    f.pool->parallel_for(f.rows, [&](std::int64_t t, int thread) {
      round_activations_bf16(format_, {f.x + t * hidden, hn},
                             {reinterpret_cast<std::uint16_t*>(xq) + t * hidden, hn},
                             thread_scratch(thread) + l.rounding);
    });
  } else if (!x_as_is) {
    f.pool->parallel_for(f.rows, [&](std::int64_t t, int) {
      for (std::int64_t c = 0; c < hidden; ++c) store(xq, t * hidden + c, f.x[t * hidden + c]);
    });
  }
  const auto x_row = [&](std::int64_t row) -> const void* {
    if (x_as_is) return f.x + row * hidden;
    return xq + static_cast<std::size_t>(row * hidden) * eb;
  };
  const auto a_row = [&](std::int64_t slot) -> const void* {
    return a + static_cast<std::size_t>(slot * inter) * eb;
  };

  const std::int64_t positions = batch.expert_offsets[batch.num_experts];
  // out[n * count + j] for the tile's rows: fused when the expert's tokens fit one tile
  // (decoded == nullptr), else over the strip decoded once for all tiles. Both give the same
  // bits (StripOps::fused_dot), so a token's result does not depend on its expert's load.
  const auto dot = [&](const PackedStrip& strip, const std::byte* decoded, const void* const* rows,
                       int count, float* out) {
    if (decoded == nullptr) {
      ops_.fused_dot(strip, rows, count, out);
    } else {
      ops_.dot(decoded, strip.kblocks, strip.scale_outside, rows, count, out);
    }
  };
  // Runs `per_tile(strip index, strip, decoded, first slot, count, bias, out)` over every
  // (local expert with tokens, strip, token tile) of p, kStripsPerTask strips per task.
  const auto for_each_strip = [&](const PackedProjection& p, auto&& per_tile) {
    const std::int64_t tasks_per_expert = (p.strips + kStripsPerTask - 1) / kStripsPerTask;
    driver::for_each_expert_tile(f, tasks_per_expert, ops_.max_tokens, [&](std::int64_t e,
                                                                          std::int64_t within,
                                                                          std::int64_t first,
                                                                          std::int64_t slots,
                                                                          int thread) {
      std::byte* scratch = thread_scratch(thread) + l.decoded;
      auto* out = reinterpret_cast<float*>(thread_scratch(thread) + l.tile);
      const std::int64_t s0 = within * kStripsPerTask;
      const std::int64_t s1 = std::min(s0 + kStripsPerTask, p.strips);
      const bool fused = ops_.fused_dot != nullptr && slots <= ops_.max_tokens;
      const std::byte* decoded = fused ? nullptr : scratch;
      const std::int64_t last = first + slots;
      for (std::int64_t s = s0; s < s1; ++s) {
        const PackedStrip strip = p.strip(e, s);
        if (!fused) {
          ops_.decode(strip, scratch);
          // The next strip's bytes come from DRAM while this one's tiles compute: without this
          // its decode waited on them (a prefill's decodes were a fifth of the experts' time).
          if (s + 1 < s1) prefetch_strip(p.strip(e, s + 1));
        }
        const float* bias =
            p.bias.empty()
                ? nullptr
                : p.bias.data() + static_cast<std::size_t>((e * p.strips + s) * kStripRows);
        for (std::int64_t p0 = first; p0 < last; p0 += ops_.max_tokens) {
          const int count = static_cast<int>(std::min<std::int64_t>(ops_.max_tokens, last - p0));
          per_tile(s, strip, decoded, p0, count, bias, out);
        }
      }
    });
  };

  // 2. GEMM1 (+b1), activation, rounding: strip s gives a[2s] and a[2s+1] of each slot.
  for_each_strip(w1_, [&](std::int64_t s, const PackedStrip& strip, const std::byte* decoded,
                          std::int64_t p0, int count, const float* bias, float* out) {
    const void* rows[kMaxTokensCap];
    for (int j = 0; j < count; ++j) rows[j] = x_row(batch.slot_rows[batch.order[p0 + j]]);
    dot(strip, decoded, rows, count, out);
    for (int j = 0; j < count; ++j) {
      const std::int64_t slot = batch.order[p0 + j];
      for (int q = 0; q < 2; ++q) {
        float gate = out[(2 * q) * count + j], up = out[(2 * q + 1) * count + j];
        if (bias != nullptr) {
          gate += bias[2 * q];
          up += bias[2 * q + 1];
        }
        const float act = activate(spec_.activation, spec_.activation_params, gate, up);
        if (block_format)
          a_f32[slot * inter + 2 * s + q] = act;
        else
          store(a, slot * inter + 2 * s + q, act);
      }
    }
  });
  if (block_format) {
    f.pool->parallel_for(positions, [&](std::int64_t p, int thread) {
      const std::int64_t slot = batch.order[p];
      round_activations_bf16(format_, {a_f32 + slot * inter, in},
                             {reinterpret_cast<std::uint16_t*>(a) + slot * inter, in},
                             thread_scratch(thread) + l.rounding);
    });
  }

  // 3. GEMM2 (+b2) into slot_out.
  for_each_strip(w2_, [&](std::int64_t s, const PackedStrip& strip, const std::byte* decoded,
                          std::int64_t p0, int count, const float* bias, float* out) {
    const void* rows[kMaxTokensCap];
    for (int j = 0; j < count; ++j) rows[j] = a_row(batch.order[p0 + j]);
    dot(strip, decoded, rows, count, out);
    driver::store_plus_bias(f, p0, count, out, 1, count, kStripRows, bias, hidden, kStripRows * s);
  });
}

}  // namespace mxmoe::strip
