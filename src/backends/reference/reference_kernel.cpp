#include "backends/reference/reference_kernel.hpp"

#include <algorithm>
#include <span>

#include "base/dot.hpp"
#include "base/thread_pool.hpp"
#include "format/activation_rounding.hpp"
#include "model/activation.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe::reference {
namespace {

constexpr std::int64_t kRowTile = 16;  // output rows per task: enough work to amortise a task
constexpr std::size_t kAlign = 64;

std::size_t align_up(std::size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

// Offsets (bytes) into the workspace: quantized inputs [rows, H], first-projection outputs
// [S, 2I], rounded activations [S, I], then per thread a dequantized row and the rounding
// scratch.
struct ReferenceKernel::Layout {
  std::size_t xq = 0, h = 0, a = 0, per_thread = 0, row_floats = 0, thread0 = 0, total = 0;
};

ReferenceKernel::Layout ReferenceKernel::layout(std::int64_t rows, std::int64_t slots,
                                                int threads) const noexcept {
  const auto m = static_cast<std::size_t>(rows);
  const auto s = static_cast<std::size_t>(slots);
  const auto hidden = static_cast<std::size_t>(spec_.hidden);
  const auto inter = static_cast<std::size_t>(spec_.intermediate);
  Layout l;
  l.row_floats = std::max(hidden, inter);
  l.xq = 0;
  l.h = l.xq + align_up(m * hidden * sizeof(float));
  l.a = l.h + align_up(s * 2 * inter * sizeof(float));
  l.thread0 = l.a + align_up(s * inter * sizeof(float));
  l.per_thread =
      align_up(l.row_floats * sizeof(float)) + align_up(rounding_scratch_bytes(l.row_floats));
  l.total = l.thread0 + l.per_thread * static_cast<std::size_t>(std::max(threads, 1));
  return l;
}

ReferenceKernel::ReferenceKernel(const Deployment& d, const LayerWeights& w)
    : spec_(d.layer),
      format_(d.request.activation.value_or(ActivationFormat::f32)),
      w1_(w.w1),
      w2_(w.w2),
      b1_(w.b1),
      b2_(w.b2) {}

std::size_t ReferenceKernel::workspace_bytes(std::int64_t rows, std::int64_t slots,
                                             int threads) const noexcept {
  return layout(rows, slots, threads).total;
}

void ReferenceKernel::run(const ExpertForward& f) const noexcept {
  const ExpertBatch& batch = f.batch;
  const Layout l = layout(f.rows, batch.slots, f.pool->size());
  const std::int64_t hidden = spec_.hidden, inter = spec_.intermediate;
  auto* xq = reinterpret_cast<float*>(f.workspace + l.xq);
  auto* h = reinterpret_cast<float*>(f.workspace + l.h);
  auto* a = reinterpret_cast<float*>(f.workspace + l.a);
  const auto row_buffer = [&](int thread) {
    return reinterpret_cast<float*>(f.workspace + l.thread0 +
                                    l.per_thread * static_cast<std::size_t>(thread));
  };
  const auto rounding_scratch = [&](int thread) {
    return f.workspace + l.thread0 + l.per_thread * static_cast<std::size_t>(thread) +
           align_up(l.row_floats * sizeof(float));
  };
  const auto hidden_n = static_cast<std::size_t>(hidden);
  const auto inter_n = static_cast<std::size_t>(inter);

  // 1. Each input row rounded to the activation format, once (shared by its slots).
  f.pool->parallel_for(f.rows, [&](std::int64_t t, int thread) {
    round_activations(format_, {f.x + t * hidden, hidden_n}, {xq + t * hidden, hidden_n},
                      rounding_scratch(thread));
  });

  // One projection for every expert: out[slot, r] = W[e, r, :] . in[row_of(slot)] + b.
  const int local = batch.num_experts;
  const auto project = [&](const Mxfp4View& w, const DenseView& bias, const float* in,
                           bool in_per_row, std::int64_t in_stride, float* out,
                           std::int64_t out_stride) {
    const std::int64_t tiles = (w.rows + kRowTile - 1) / kRowTile;
    const auto cols = static_cast<std::size_t>(w.cols);
    f.pool->parallel_for(local * tiles, [&](std::int64_t task, int thread) {
      const int e = static_cast<int>(task / tiles);
      const std::int32_t first = batch.expert_offsets[e], last = batch.expert_offsets[e + 1];
      if (first == last) return;
      float* row = row_buffer(thread);
      const std::int64_t r0 = task % tiles * kRowTile, r1 = std::min(r0 + kRowTile, w.rows);
      for (std::int64_t r = r0; r < r1; ++r) {
        dequantize_mxfp4({w.row_blocks(e, r), static_cast<std::size_t>(w.row_bytes())},
                         {w.row_scale(e, r), static_cast<std::size_t>(w.row_scales())},
                         {row, cols});
        const double b = bias.empty() ? 0.0 : static_cast<double>(bias.at(e * w.rows + r));
        for (std::int32_t p = first; p < last; ++p) {
          const std::int64_t slot = batch.order[p];
          const float* v = in + (in_per_row ? batch.slot_rows[slot] : slot) * in_stride;
          out[slot * out_stride + r] = static_cast<float>(dot_f64(row, v, cols) + b);
        }
      }
    });
  };

  // 2. GEMM1 (+b1) into h[slot].
  project(w1_, b1_, xq, true, hidden, h, 2 * inter);

  // 3. a = act(gate, up), rounded to the activation format, per slot.
  f.pool->parallel_for(batch.expert_offsets[batch.num_experts], [&](std::int64_t p, int thread) {
    const std::int64_t slot = batch.order[p];
    float* as = a + slot * inter;
    activate_row(spec_, h + slot * 2 * inter, as);
    round_activations(format_, {as, inter_n}, {as, inter_n}, rounding_scratch(thread));
  });

  // 4. GEMM2 (+b2) into slot_out[slot].
  project(w2_, b2_, a, false, inter, f.slot_out, hidden);
}

}  // namespace mxmoe::reference
