// LayerStorage::random: the in-memory random layer (embedded default, tests, benchmarks), and
// the GenerationPoll its generation calls between pieces so a writer's Ctrl-C is noticed.
#include "model/random_weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "format/e4m3_blocks.hpp"
#include "model/dense_view.hpp"
#include "model/generation_poll.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

namespace {

class Builder {
 public:
  static constexpr std::int64_t kPollBytes = std::int64_t{8} << 20;  // a multiple of 8

  Builder(std::vector<std::vector<std::byte>>& buffers, std::uint64_t seed)
      : buffers_(buffers), rng_(seed) {}

  // Values uniform in [-scale, scale).
  DenseView dense(std::int64_t rows, std::int64_t cols, float scale) {
    float* p = alloc<float>(rows * cols);
    for (std::int64_t i = 0; i < rows * cols; ++i) p[i] = scale * rng_.symmetric();
    return DenseView{ElementType::f32, p, rows, cols};
  }

  // Random E2M1 codes (all 16 equally likely) and E8M0 scales of mxfp4_random_scale_base
  // (model/random_weights.hpp). With parts = 2 each expert's two row halves are separate
  // segments, stored second half first, so a reader that assumed one contiguous tensor fails;
  // the values of each logical row are the same whatever `parts` (the stream is drawn in
  // logical row order).
  Mxfp4View mxfp4(std::int64_t experts, std::int64_t rows, std::int64_t cols, int parts = 1) {
    const std::int64_t count = experts * rows;
    const std::int64_t row_bytes = cols / 2, row_scales = cols / 32;
    auto* blocks = alloc<std::uint8_t>(count * row_bytes);
    auto* scales = alloc<std::uint8_t>(count * row_scales);
    const std::int64_t seg_rows = rows / parts;
    // Physical row of logical row `row` (expert-major): segment p of expert e sits at slot
    // (parts - 1 - p) * experts + e of the buffer.
    const auto physical = [&](std::int64_t row) {
      const std::int64_t e = row / rows, r = row % rows, p = r / seg_rows;
      return ((parts - 1 - p) * experts + e) * seg_rows + r % seg_rows;
    };
    const std::int64_t nbytes = count * row_bytes;
    for (std::int64_t i = 0; i < nbytes; i += 8) {  // 8 | row_bytes: a draw never spans rows
      if (i % kPollBytes == 0) model::GenerationPoll::poll();
      const std::uint64_t r = rng_.next();
      const auto n = static_cast<std::size_t>(std::min<std::int64_t>(8, nbytes - i));
      std::memcpy(blocks + physical(i / row_bytes) * row_bytes + i % row_bytes, &r, n);
    }
    const int base = mxfp4_random_scale_base(cols);
    for (std::int64_t i = 0; i < count * row_scales; ++i)
      scales[physical(i / row_scales) * row_scales + i % row_scales] =
          static_cast<std::uint8_t>(base + static_cast<int>(rng_.next() % 3));
    std::vector<Mxfp4Segment> table(static_cast<std::size_t>(experts * parts));
    for (std::int64_t e = 0; e < experts; ++e)
      for (int p = 0; p < parts; ++p) {
        const std::int64_t first_row = physical(e * rows + p * seg_rows);
        table[static_cast<std::size_t>(e * parts + p)] = {blocks + first_row * row_bytes,
                                                          scales + first_row * row_scales};
      }
    return Mxfp4View::segmented(std::move(table), parts, experts, rows, cols);
  }

  // A dense [rows, cols] matrix of values ~ U(-1, 1) / sqrt(cols) (a unit-variance input
  // gives O(1) outputs) in `format`; FP8 gets E8M0 block scales chosen by the round-up rule.
  DenseMatrixView dense_matrix(ElementType format, std::int64_t rows, std::int64_t cols,
                               int parts) {
    if (!DenseMatrixView::holds(format))
      refuse_element("DenseMatrixView", kDenseMatrixViewHolds, format);
    DenseMatrixView v;
    v.element = format;
    v.rows = rows;
    v.cols = cols;
    v.parts = parts;
    const std::int64_t seg_rows = rows / parts;
    const float amplitude = static_cast<float>(1.0 / std::sqrt(static_cast<double>(cols)));
    for (int p = 0; p < parts; ++p) {
      std::vector<float> values(static_cast<std::size_t>(seg_rows * cols));
      for (float& x : values) x = amplitude * rng_.symmetric();
      DenseMatrixView::Segment& g = v.segment[p];
      if (format == ElementType::f32) {
        float* d = alloc<float>(seg_rows * cols);
        std::copy(values.begin(), values.end(), d);
        g.data = d;
      } else if (format == ElementType::bf16) {
        auto* d = alloc<std::uint16_t>(seg_rows * cols);
        for (std::size_t i = 0; i < values.size(); ++i) d[i] = f32_to_bf16(values[i]);
        g.data = d;
      } else {
        v.scale_e8m0 = true;
        auto* d = alloc<std::uint8_t>(seg_rows * cols);
        auto* sc = alloc<std::uint8_t>(v.scale_rows() * v.scale_cols());
        format::quantize_e4m3_blocks(
            values, seg_rows, cols, DenseMatrixView::kScaleBlock,
            {d, static_cast<std::size_t>(seg_rows * cols)},
            {sc, static_cast<std::size_t>(v.scale_rows() * v.scale_cols())});
        g.data = d;
        g.scales = sc;
      }
    }
    return v;
  }

  // tid2eid [vocab, top_k]: distinct random experts per token (a partial shuffle).
  TokenExpertTable token_experts(std::int64_t vocab, int top_k, int experts) {
    auto* ids = alloc<std::int32_t>(vocab * top_k);
    std::vector<std::int32_t> order(static_cast<std::size_t>(experts));
    for (int e = 0; e < experts; ++e) order[static_cast<std::size_t>(e)] = e;
    for (std::int64_t t = 0; t < vocab; ++t)
      for (int j = 0; j < top_k; ++j) {
        const auto pick =
            static_cast<std::size_t>(j) +
            static_cast<std::size_t>(rng_.next() % static_cast<std::uint64_t>(experts - j));
        std::swap(order[static_cast<std::size_t>(j)], order[pick]);
        ids[t * top_k + j] = order[static_cast<std::size_t>(j)];
      }
    return TokenExpertTable{ids, false, vocab, top_k};
  }

 private:
  template <class T>
  T* alloc(std::int64_t n) {
    buffers_.emplace_back(static_cast<std::size_t>(n) * sizeof(T));
    return reinterpret_cast<T*>(buffers_.back().data());
  }
  std::vector<std::vector<std::byte>>& buffers_;
  Rng rng_;
};

}  // namespace

LayerStorage LayerStorage::random(const LayerSpec& spec, std::uint64_t seed) {
  validate(spec);
  LayerStorage s;
  Builder b(s.buffers_, seed);
  const std::int64_t e = spec.num_experts, h = spec.hidden, i = spec.intermediate;
  const int halves = spec.gate_up_layout == GateUpLayout::halves ? 2 : 1;
  LayerWeights& w = s.views_;
  // Router: logits ~ O(1) for unit-variance inputs (uniform weights of variance 1/H), so
  // the routing is spread over the experts and rarely tied.
  w.router_weight = b.dense(e, h, static_cast<float>(std::sqrt(3.0 / static_cast<double>(h))));
  if (spec.router_bias) w.router_bias = b.dense(1, e, 0.1f);
  if (spec.routing_params.selection_bias) w.selection_bias = b.dense(1, e, 0.05f);
  if (spec.routing == RoutingMethod::hash)
    w.token_experts = b.token_experts(spec.vocab, spec.top_k, spec.num_experts);
  w.w1 = b.mxfp4(e, 2 * i, h, halves);
  if (spec.expert_bias) w.b1 = b.dense(e, 2 * i, 0.1f);
  w.w2 = b.mxfp4(e, h, i);
  if (spec.expert_bias) w.b2 = b.dense(e, h, 0.1f);
  if (spec.shared_experts > 0) {
    const std::int64_t is = spec.shared_intermediate;
    if (spec.shared_weight_format == ElementType::mxfp4) {
      w.shared_w1 = b.mxfp4(1, 2 * is, h, halves);
      w.shared_w2 = b.mxfp4(1, h, is);
    } else {
      w.shared_dense_w1 = b.dense_matrix(spec.shared_weight_format, 2 * is, h, halves);
      w.shared_dense_w2 = b.dense_matrix(spec.shared_weight_format, h, is, 1);
    }
  }
  return s;
}

namespace model {
namespace {
thread_local const GenerationPoll* t_innermost = nullptr;  // scoped: see GenerationPoll
}  // namespace

GenerationPoll::GenerationPoll(std::function<void()> poll)
    : poll_(std::move(poll)), outer_(t_innermost) {
  t_innermost = this;
}

GenerationPoll::~GenerationPoll() {
  t_innermost = outer_;
}

void GenerationPoll::poll() {
  if (t_innermost && t_innermost->poll_) t_innermost->poll_();
}

}  // namespace model

}  // namespace mxmoe
