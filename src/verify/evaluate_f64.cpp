#include "verify/evaluate_f64.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <type_traits>

#include "base/thread_pool.hpp"
#include "format/activation_rounding.hpp"
#include "model/activation.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe {
namespace {

std::size_t row_width(const LayerSpec& s) {
  return static_cast<std::size_t>(std::max({s.hidden, s.intermediate, s.shared_intermediate}));
}

class ExpertEvaluator {
 public:
  ExpertEvaluator(const LayerSpec& spec, std::optional<ActivationFormat> format, bool int16_blocks,
                  bool track_flips)
      : spec_(spec),
        format_(format),
        int16_blocks_(int16_blocks),
        track_flips_(track_flips && format == ActivationFormat::bf16),
        row_f32_(row_width(spec)),
        row_(row_width(spec)),
        scratch_(rounding_scratch_bytes(row_.size()) + sizeof(float)) {}

  // out += scale * (W2 . Q(act(W1 . xq + b1)) + b2) for expert e of (w1, b1, w2, b2);
  // W is an Mxfp4View or (one expert, e = 0) a DenseMatrixView.
  template <class W>
  void add(const W& w1, const DenseView& b1, const W& w2, const DenseView& b2, std::int64_t e,
           const float* xq, double scale, double* out) {
    const std::int64_t inter = w2.cols, hidden = w2.rows;
    // The MXFP4 experts of an int16-block backend see its rounding; a dense (FP8) shared
    // expert runs on the dense kernel, which rounds to the format only.
    const bool int16 = int16_blocks_ && std::is_same_v<W, Mxfp4View>;
    std::vector<float> x16;
    if (int16) {
      x16.assign(xq, xq + w1.cols);
      round_activations_int16_blocks(x16, x16);
      xq = x16.data();
    }
    std::vector<double> h(static_cast<std::size_t>(2 * inter));
    for (std::int64_t r = 0; r < 2 * inter; ++r) {
      double v = row_dot(w1, e, r, xq);
      if (!b1.empty()) v += static_cast<double>(b1.at(e * 2 * inter + r));
      h[static_cast<std::size_t>(r)] = v;
    }
    LayerSpec act_spec = spec_;
    act_spec.intermediate = static_cast<int>(inter);
    std::vector<double> a(static_cast<std::size_t>(inter));
    activate_row(act_spec, h.data(), a.data());
    std::vector<float> aq(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) aq[i] = static_cast<float>(a[i]);
    if (format_) {
      round_activations(*format_, aq, aq, scratch_.data());
      if (int16) round_activations_int16_blocks(aq, aq);
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(aq[i]);
    }
    std::vector<double> column_norm2(track_flips_ ? a.size() : 0);
    for (std::int64_t r = 0; r < hidden; ++r) {
      double v = 0;
      dequantize(w2, e, r);
      for (std::int64_t i = 0; i < inter; ++i)
        v += row_[static_cast<std::size_t>(i)] * a[static_cast<std::size_t>(i)];
      for (std::size_t i = 0; i < column_norm2.size(); ++i) column_norm2[i] += row_[i] * row_[i];
      if (!b2.empty()) v += static_cast<double>(b2.at(e * hidden + r));
      out[r] += scale * v;
    }
    // bf16 keeps 8 significant bits: the step above |a| in [2^k, 2^(k+1)) is 2^(k-7), and the
    // step below is that or half of it, so 2^(k-7) bounds the move to either neighbour.
    for (std::size_t i = 0; i < column_norm2.size(); ++i)
      if (a[i] != 0)
        largest_flip_ = std::max(largest_flip_, std::abs(scale) * std::ldexp(1.0, std::ilogb(a[i]) - 7) *
                                                    std::sqrt(column_norm2[i]));
  }

  double largest_flip() const { return largest_flip_; }

  void round_input(const float* x, float* xq) {
    const auto n = static_cast<std::size_t>(spec_.hidden);
    if (format_)
      round_activations(*format_, {x, n}, {xq, n}, scratch_.data());
    else
      std::copy(x, x + n, xq);
  }

 private:
  // row_ = row r of expert e's weights, exactly (E2M1 x 2^k is exact in float32; a dense
  // value is exact in double).
  void dequantize(const Mxfp4View& w, std::int64_t e, std::int64_t r) {
    dequantize_mxfp4({w.row_blocks(e, r), static_cast<std::size_t>(w.row_bytes())},
                     {w.row_scale(e, r), static_cast<std::size_t>(w.row_scales())},
                     {row_f32_.data(), static_cast<std::size_t>(w.cols)});
    for (std::int64_t i = 0; i < w.cols; ++i)
      row_[static_cast<std::size_t>(i)] =
          static_cast<double>(row_f32_[static_cast<std::size_t>(i)]);
  }
  void dequantize(const DenseMatrixView& w, std::int64_t /*e*/, std::int64_t r) {
    for (std::int64_t i = 0; i < w.cols; ++i) row_[static_cast<std::size_t>(i)] = w.value(r, i);
  }
  template <class W>
  double row_dot(const W& w, std::int64_t e, std::int64_t r, const float* v) {
    dequantize(w, e, r);
    double acc = 0;
    for (std::int64_t i = 0; i < w.cols; ++i)
      acc += row_[static_cast<std::size_t>(i)] * static_cast<double>(v[i]);
    return acc;
  }

  const LayerSpec& spec_;
  std::optional<ActivationFormat> format_;
  bool int16_blocks_;
  bool track_flips_;
  double largest_flip_ = 0;
  std::vector<float> row_f32_;
  std::vector<double> row_;
  std::vector<std::byte> scratch_;
};

}  // namespace

std::vector<double> evaluate_f64(const LayerSpec& spec, const LayerWeights& w, const float* x,
                                 std::int64_t tokens, const std::int32_t* ids, const float* weights,
                                 std::optional<ActivationFormat> format, ThreadPool* pool,
                                 bool int16_blocks, double* largest_flip) {
  const std::int64_t hidden = spec.hidden;
  const int k = spec.top_k;
  std::vector<double> y(static_cast<std::size_t>(tokens * hidden), 0.0);
  std::vector<double> flips(static_cast<std::size_t>(tokens), 0.0);  // per token
  const auto token = [&](std::int64_t t) {
    ExpertEvaluator eval(spec, format, int16_blocks && format.has_value(), largest_flip != nullptr);
    std::vector<float> xq(static_cast<std::size_t>(hidden));
    eval.round_input(x + t * hidden, xq.data());
    double* yt = y.data() + t * hidden;
    for (int j = 0; j < k; ++j) {
      const std::int32_t e = ids[t * k + j];
      eval.add(w.w1, w.b1, w.w2, w.b2, e, xq.data(), static_cast<double>(weights[t * k + j]), yt);
    }
    if (spec.shared_experts > 0) {
      if (spec.shared_weight_format == ElementType::mxfp4)
        eval.add(w.shared_w1, DenseView{}, w.shared_w2, DenseView{}, 0, xq.data(), 1.0, yt);
      else
        eval.add(w.shared_dense_w1, DenseView{}, w.shared_dense_w2, DenseView{}, 0, xq.data(), 1.0,
                 yt);
    }
    flips[static_cast<std::size_t>(t)] = eval.largest_flip();
  };
  if (pool != nullptr)
    pool->parallel_for(tokens, [&](std::int64_t t, int) { token(t); });
  else
    for (std::int64_t t = 0; t < tokens; ++t) token(t);
  if (largest_flip != nullptr)
    *largest_flip = flips.empty() ? 0.0 : *std::max_element(flips.begin(), flips.end());
  return y;
}

}  // namespace mxmoe
