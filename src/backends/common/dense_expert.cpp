#include "backends/common/dense_expert.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/common/dense_dot.hpp"
#include "backends/common/expert_driver.hpp"
#include "base/thread_pool.hpp"
#include "format/activation_rounding.hpp"
#include "model/activation.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe {

namespace dense {

void dense_expert_dot_2x4__portable(const DenseRows& w, int rows, const float* const* x, int tokens,
                                    float* out) noexcept {
  for (int n = 0; n < rows; ++n) {
    for (int t = 0; t < tokens; ++t) {
      float acc[kLanes] = {};
      for (std::int64_t k = 0; k < w.k; k += kLanes) {
        for (int l = 0; l < kLanes; ++l) {
          const std::int64_t i = n * w.stride + k + l;
          const float wv = w.bf16 ? bf16_to_f32(static_cast<const std::uint16_t*>(w.w)[i])
                                  : static_cast<const float*>(w.w)[i];
          acc[l] = std::fma(wv, x[t][k + l], acc[l]);
        }
      }
      out[n * tokens + t] =
          ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    }
  }
}

}  // namespace dense

namespace {

constexpr std::int64_t kRowsPerTask = 16;
using driver::align_up;

// One projection, dequantized: bf16 when every value is exactly a bf16, else float32.
struct DenseProjection {
  std::int64_t rows = 0, cols = 0;
  bool bf16 = false;
  std::vector<std::uint16_t> b;
  std::vector<float> f;
  dense::DenseRows view() const noexcept {
    return {bf16 ? static_cast<const void*>(b.data()) : static_cast<const void*>(f.data()), bf16,
            cols, cols};
  }
  std::size_t bytes() const noexcept { return b.size() * 2 + f.size() * 4; }
};

DenseProjection pack(const DenseMatrixView& v) {
  DenseProjection p;
  p.rows = v.rows;
  p.cols = v.cols;
  const auto n = static_cast<std::size_t>(v.rows * v.cols);
  // float32 first (exact for every source but E4M3 x float32 scales, rounded once there),
  // then bf16 if that loses nothing.
  p.f.resize(n);
  bool exact_bf16 = true;
  for (std::int64_t r = 0; r < v.rows; ++r)
    for (std::int64_t c = 0; c < v.cols; ++c) {
      const double value = v.value(r, c);
      const float f = static_cast<float>(value);
      p.f[static_cast<std::size_t>(r * v.cols + c)] = f;
      exact_bf16 =
          exact_bf16 && static_cast<double>(f) == value && bf16_to_f32(f32_to_bf16(f)) == f;
    }
  p.bf16 = exact_bf16;
  if (exact_bf16) {
    p.b.resize(n);
    for (std::size_t i = 0; i < n; ++i) p.b[i] = f32_to_bf16(p.f[i]);
    std::vector<float>().swap(p.f);
  }
  return p;
}

class DenseExpertKernel final : public ExpertKernel {
 public:
  DenseExpertKernel(const Deployment& d, const DenseMatrixView& w1, const DenseMatrixView& w2)
      : spec_(d.layer),
        format_(d.request.activation.value_or(ActivationFormat::f32)),
        w1_(pack(w1)),
        w2_(pack(w2)),
        dot_(&dense::dense_expert_dot_2x4__portable) {
    const std::int64_t h = spec_.hidden, i = spec_.intermediate;
    if (spec_.num_experts != 1 || w1.rows != 2 * i || w1.cols != h || w2.rows != h ||
        w2.cols != i || h % dense::kLanes != 0 || i % dense::kLanes != 0)
      throw std::invalid_argument("dense expert: weights [" + std::to_string(w1.rows) + ", " +
                                  std::to_string(w1.cols) + "] / [" + std::to_string(w2.rows) +
                                  ", " + std::to_string(w2.cols) +
                                  "] do not match the spec's one expert");
#if MXMOE_X86_KERNELS
    if (isa_feature(d.hardware.isa, "avx2").value_or(false) &&
        isa_feature(d.hardware.isa, "fma").value_or(false))
      dot_ = &dense::dense_expert_dot_2x4__avx2;
#endif
  }

  std::size_t workspace_bytes(std::int64_t rows, std::int64_t slots,
                              int threads) const noexcept override {
    return layout(rows, slots).threads.total(threads);
  }
  std::size_t packed_bytes() const noexcept override {
    return w1_.bytes() + w2_.bytes();
  }
  void run(const ExpertForward& f) const noexcept override;

 private:
  struct Layout {
    std::size_t xq = 0, h = 0, a = 0;
    driver::ThreadRegions threads;  // each: the rounding scratch
  };
  Layout layout(std::int64_t rows, std::int64_t slots) const noexcept {
    const auto hidden = static_cast<std::size_t>(spec_.hidden);
    const auto inter = static_cast<std::size_t>(spec_.intermediate);
    const auto s = static_cast<std::size_t>(std::max<std::int64_t>(slots, 0));
    Layout l;
    driver::Carve shared;
    l.xq = shared.take(static_cast<std::size_t>(std::max<std::int64_t>(rows, 0)) * hidden * 4);
    l.h = shared.take(s * 2 * inter * 4);
    l.a = shared.take(s * inter * 4);
    l.threads = {.base = shared.end,
                 .per_thread = align_up(rounding_scratch_bytes(std::max(hidden, inter)))};
    return l;
  }

  // out[slot * out_stride + r] = W[r] . in[row(slot)] for every slot of the batch.
  template <class RowOf>
  void project(const ExpertForward& f, const DenseProjection& w, RowOf row_of, float* out,
               std::int64_t out_stride) const noexcept {
    const ExpertBatch& batch = f.batch;
    const std::int32_t first = batch.expert_offsets[0], last = batch.expert_offsets[1];
    const std::int64_t tiles = (w.rows + kRowsPerTask - 1) / kRowsPerTask;
    const dense::DenseRows base = w.view();
    f.pool->parallel_for(tiles, [&](std::int64_t tile, int) {
      const std::int64_t r0 = tile * kRowsPerTask, r1 = std::min(r0 + kRowsPerTask, w.rows);
      for (std::int32_t p0 = first; p0 < last; p0 += dense::kMaxTokens) {
        const int count = static_cast<int>(std::min<std::int32_t>(dense::kMaxTokens, last - p0));
        const float* x[dense::kMaxTokens];
        for (int j = 0; j < count; ++j) x[j] = row_of(batch.order[p0 + j]);
        for (std::int64_t r = r0; r < r1; r += dense::kMaxRows) {
          const int rows = static_cast<int>(std::min<std::int64_t>(dense::kMaxRows, r1 - r));
          dense::DenseRows rw = base;
          rw.w = w.bf16 ? static_cast<const void*>(w.b.data() + r * w.cols)
                        : static_cast<const void*>(w.f.data() + r * w.cols);
          float o[dense::kMaxRows * dense::kMaxTokens];
          dot_(rw, rows, x, count, o);
          for (int n = 0; n < rows; ++n)
            for (int j = 0; j < count; ++j)
              out[batch.order[p0 + j] * out_stride + r + n] = o[n * count + j];
        }
      }
    });
  }

  LayerSpec spec_;
  ActivationFormat format_;
  DenseProjection w1_, w2_;
  dense::DenseDotFn dot_;
};

void DenseExpertKernel::run(const ExpertForward& f) const noexcept {
  const ExpertBatch& batch = f.batch;
  const Layout l = layout(f.rows, batch.slots);
  const std::int64_t hidden = spec_.hidden, inter = spec_.intermediate;
  auto* xq = reinterpret_cast<float*>(f.workspace + l.xq);
  auto* h = reinterpret_cast<float*>(f.workspace + l.h);
  auto* a = reinterpret_cast<float*>(f.workspace + l.a);
  const auto scratch = [&](int thread) { return l.threads.of(f.workspace, thread); };
  const auto hn = static_cast<std::size_t>(hidden), in = static_cast<std::size_t>(inter);
  f.pool->parallel_for(f.rows, [&](std::int64_t t, int thread) {
    round_activations(format_, {f.x + t * hidden, hn}, {xq + t * hidden, hn}, scratch(thread));
  });
  project(
      f, w1_, [&](std::int64_t slot) { return xq + batch.slot_rows[slot] * hidden; }, h, 2 * inter);
  const std::int32_t first = batch.expert_offsets[0], last = batch.expert_offsets[1];
  f.pool->parallel_for(last - first, [&](std::int64_t p, int thread) {
    const std::int64_t slot = batch.order[first + p];
    float* as = a + slot * inter;
    activate_row(spec_, h + slot * 2 * inter, as);
    round_activations(format_, {as, in}, {as, in}, scratch(thread));
  });
  project(
      f, w2_, [&](std::int64_t slot) { return a + slot * inter; }, f.slot_out, hidden);
}

}  // namespace

std::unique_ptr<ExpertKernel> make_dense_expert_kernel(const Deployment& d,
                                                       const DenseMatrixView& w1,
                                                       const DenseMatrixView& w2) {
  return std::make_unique<DenseExpertKernel>(d, w1, w2);
}

}  // namespace mxmoe
