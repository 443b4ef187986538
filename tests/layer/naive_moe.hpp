// A naive float64 MoE layer, written for the tests and independent of the library's code:
// its own E2M1 table, dequantization, routing and activations (only the activation-format
// quantizers come from mxmoe/format.hpp, which the format tests check on their own).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <vector>

#include "mxmoe/deployment.hpp"
#include "mxmoe/format.hpp"
#include "mxmoe/weights.hpp"

namespace naive {

inline constexpr double kE2m1[16] = {0,  0.5,  1,  1.5,  2,  3,  4,  6,
                                     -0, -0.5, -1, -1.5, -2, -3, -4, -6};

// Row r of expert e, dequantized: element 2j in the low nibble of byte j, 2j+1 in the high.
inline std::vector<double> row(const mxmoe::Mxfp4View& w, std::int64_t e, std::int64_t r) {
  std::vector<double> out(static_cast<std::size_t>(w.cols));
  const std::uint8_t* bytes = w.row_blocks(e, r);  // where the row lives (a segment's row)
  const std::uint8_t* scales = w.row_scale(e, r);
  for (std::int64_t i = 0; i < w.cols; ++i) {
    const std::uint8_t byte = bytes[i / 2];
    const int code = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    const double scale = std::ldexp(1.0, static_cast<int>(scales[i / 32]) - 127);
    out[static_cast<std::size_t>(i)] = kE2m1[code] * scale;
  }
  return out;
}

// E4M3 "fn": sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal
// (m/8 x 2^-6); S.1111.111 is NaN.
inline double e4m3(std::uint8_t code) {
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int exp = (code >> 3) & 0xF, man = code & 7;
  if (exp == 0xF && man == 7) return std::nan("");
  if (exp == 0) return sign * std::ldexp(man / 8.0, -6);
  return sign * std::ldexp(1.0 + man / 8.0, exp - 7);
}

// Row r of a dense matrix (the shared expert), dequantized from its raw bytes: bf16 bits
// shifted into a float, float32 as is, or E4M3 x the scale of its 128 x 128 block.
inline std::vector<double> row(const mxmoe::DenseMatrixView& w, std::int64_t /*e*/,
                               std::int64_t r) {
  std::vector<double> out(static_cast<std::size_t>(w.cols));
  const std::int64_t seg_rows = w.rows / w.parts, rr = r % seg_rows;
  const auto& seg = w.segment[r / seg_rows];
  const std::int64_t scale_cols = (w.cols + 127) / 128;
  for (std::int64_t c = 0; c < w.cols; ++c) {
    const std::int64_t i = rr * w.cols + c;
    double v = 0;
    switch (w.element) {
      case mxmoe::ElementType::f32:
        v = static_cast<const float*>(seg.data)[i];
        break;
      case mxmoe::ElementType::bf16: {
        const std::uint32_t bits =
            static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(seg.data)[i]) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        v = f;
        break;
      }
      case mxmoe::ElementType::fp8_e4m3: {
        const std::int64_t b = rr / 128 * scale_cols + c / 128;
        const double scale =
            w.scale_e8m0 ? std::ldexp(1.0, static_cast<const std::uint8_t*>(seg.scales)[b] - 127)
                         : static_cast<double>(static_cast<const float*>(seg.scales)[b]);
        v = e4m3(static_cast<const std::uint8_t*>(seg.data)[i]) * scale;
        break;
      }
      case mxmoe::ElementType::mxfp4:
        throw std::invalid_argument("naive_moe: a DenseMatrixView does not hold mxfp4");
    }
    out[static_cast<std::size_t>(c)] = v;
  }
  return out;
}

// Round a vector to an activation format the way the backends do (per token / block).
inline void round_to(std::optional<mxmoe::ActivationFormat> f, std::vector<float>& v) {
  using mxmoe::ActivationFormat;
  if (!f || *f == ActivationFormat::f32) return;
  const std::size_t n = v.size(), blocks = n / 32;
  if (*f == ActivationFormat::bf16) {
    for (float& x : v) x = mxmoe::bf16_to_f32(mxmoe::f32_to_bf16(x));
  } else if (*f == ActivationFormat::int8) {
    std::vector<std::int8_t> q(n);
    std::vector<float> d(blocks);
    mxmoe::quantize_int8_block32(v, q, d);
    mxmoe::dequantize_int8_block32(q, d, v);
  } else {
    std::vector<std::uint8_t> codes(n), scales(blocks);
    mxmoe::quantize_mxfp8(v, mxmoe::ScaleRule::round_up, codes, scales);
    mxmoe::dequantize_mxfp8(codes, scales, v);
  }
}

inline double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

inline double act(const mxmoe::LayerSpec& s, double g, double u) {
  const double limit = s.activation_params.limit, alpha = s.activation_params.alpha;
  switch (s.activation) {
    case mxmoe::ActivationFn::swiglu_oai:
      g = std::min(g, limit);
      u = std::max(-limit, std::min(u, limit));
      return g * sigmoid(alpha * g) * (u + 1.0);
    case mxmoe::ActivationFn::silu_glu:
      return g * sigmoid(g) * u;
    case mxmoe::ActivationFn::silu_glu_clamp:
      g = std::min(g, limit);
      u = std::max(-limit, std::min(u, limit));
      return g * sigmoid(g) * u;
  }
  return 0;
}

struct Routing {
  std::vector<std::int32_t> ids;  // [M, k]
  std::vector<float> weights;     // [M, k]
};

// Indices of the k largest values, descending, ties to the lower index (a stable sort).
inline std::vector<int> top(const std::vector<double>& v, int k, const std::vector<bool>& allowed) {
  std::vector<int> idx;
  for (int i = 0; i < static_cast<int>(v.size()); ++i)
    if (allowed[static_cast<std::size_t>(i)]) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
    return v[static_cast<std::size_t>(a)] > v[static_cast<std::size_t>(b)];
  });
  idx.resize(static_cast<std::size_t>(k));
  return idx;
}

// The chosen experts' scores, divided by their sum when renormalize, times the scaling factor.
inline std::vector<double> chosen_weights(const mxmoe::RoutingParams& p,
                                          const std::vector<double>& score,
                                          const std::vector<int>& chosen) {
  std::vector<double> w;
  double sum = 0;
  for (const int e : chosen) sum += score[static_cast<std::size_t>(e)];
  for (const int e : chosen)
    w.push_back((p.renormalize ? score[static_cast<std::size_t>(e)] / sum
                               : score[static_cast<std::size_t>(e)]) *
                static_cast<double>(p.routed_scaling_factor));
  return w;
}

// Routing of one token's logits by the family math of FORMATS.md §4, in double.
inline void route_token(const mxmoe::LayerSpec& s, const std::vector<double>& logit,
                        const std::vector<double>& bias, std::int32_t* ids, float* weights) {
  const int e = s.num_experts, k = s.top_k;
  const auto& p = s.routing_params;
  std::vector<bool> all(static_cast<std::size_t>(e), true);
  std::vector<double> w(static_cast<std::size_t>(k));
  std::vector<int> chosen;
  using mxmoe::RoutingMethod;
  if (s.routing == RoutingMethod::topk_softmax) {
    chosen = top(logit, k, all);
    double sum = 0;
    for (int j = 0; j < k; ++j)
      sum += w[static_cast<std::size_t>(j)] =
          std::exp(logit[static_cast<std::size_t>(chosen[static_cast<std::size_t>(j)])] -
                   logit[static_cast<std::size_t>(chosen[0])]);
    for (double& x : w) x /= sum;
  } else if (s.routing == RoutingMethod::softmax_topk) {
    const double mx = *std::max_element(logit.begin(), logit.end());
    std::vector<double> prob(logit.size()), sel(logit.size());
    double sum = 0;
    for (std::size_t i = 0; i < logit.size(); ++i) sum += prob[i] = std::exp(logit[i] - mx);
    for (double& x : prob) x /= sum;
    for (std::size_t i = 0; i < logit.size(); ++i)
      sel[i] = prob[i] + (p.selection_bias ? bias[i] : 0.0);
    chosen = top(sel, k, all);
    w = chosen_weights(p, prob, chosen);
  } else if (s.routing == RoutingMethod::hash) {
    // DeepSeek-V4's hash layers: the experts come from the table (given in ids by the
    // caller); the weights are the score function at those experts, normalised, scaled.
    std::vector<double> score(logit.size());
    const double mx = *std::max_element(logit.begin(), logit.end());
    double total = 0;
    for (std::size_t i = 0; i < logit.size(); ++i) {
      switch (p.score_function) {
        case mxmoe::ScoreFunction::sqrtsoftplus:
          score[i] = std::sqrt(std::log1p(std::exp(logit[i])));
          break;
        case mxmoe::ScoreFunction::sigmoid:
          score[i] = sigmoid(logit[i]);
          break;
        case mxmoe::ScoreFunction::softmax:
          total += score[i] = std::exp(logit[i] - mx);
          break;
      }
    }
    if (p.score_function == mxmoe::ScoreFunction::softmax)
      for (double& x : score) x /= total;
    for (int j = 0; j < k; ++j) chosen.push_back(ids[j]);
    w = chosen_weights(p, score, chosen);
  } else {
    std::vector<double> score(logit.size()), sel(logit.size());
    for (std::size_t i = 0; i < logit.size(); ++i) {
      score[i] = s.routing == RoutingMethod::sigmoid_group_topk
                     ? sigmoid(logit[i])
                     : std::sqrt(std::log1p(std::exp(logit[i])));
      sel[i] = score[i] + (p.selection_bias ? bias[i] : 0.0);
    }
    std::vector<bool> allowed = all;
    if (s.routing == RoutingMethod::sigmoid_group_topk && p.n_group > 1) {
      const int per = e / p.n_group;
      std::vector<double> group(static_cast<std::size_t>(p.n_group));
      for (int g = 0; g < p.n_group; ++g) {
        std::vector<double> members(sel.begin() + g * per, sel.begin() + (g + 1) * per);
        std::sort(members.begin(), members.end(), std::greater<>());
        group[static_cast<std::size_t>(g)] = members[0] + (per > 1 ? members[1] : 0.0);
      }
      const std::vector<int> kept = top(group, p.topk_group, std::vector<bool>(group.size(), true));
      for (int i = 0; i < e; ++i)
        allowed[static_cast<std::size_t>(i)] =
            std::find(kept.begin(), kept.end(), i / per) != kept.end();
    }
    chosen = top(sel, k, allowed);
    w = chosen_weights(p, score, chosen);
  }
  for (int j = 0; j < k; ++j) {
    ids[j] = chosen[static_cast<std::size_t>(j)];
    weights[j] = static_cast<float>(w[static_cast<std::size_t>(j)]);
  }
}

// token_ids: [tokens] for a hash layer (its experts: the table's row of the token).
inline Routing route(const mxmoe::LayerSpec& s, const mxmoe::LayerWeights& w, const float* x,
                     std::int64_t tokens, const std::int32_t* token_ids = nullptr) {
  const int e = s.num_experts;
  Routing r;
  r.ids.assign(static_cast<std::size_t>(tokens * s.top_k), 0);
  r.weights.assign(r.ids.size(), 0.0f);
  std::vector<double> bias(static_cast<std::size_t>(e), 0.0);
  if (!w.selection_bias.empty())
    for (int i = 0; i < e; ++i) bias[static_cast<std::size_t>(i)] = w.selection_bias.at(i);
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::vector<double> logit(static_cast<std::size_t>(e));
    for (int i = 0; i < e; ++i) {
      double v = w.router_bias.empty() ? 0.0 : static_cast<double>(w.router_bias.at(i));
      for (int h = 0; h < s.hidden; ++h)
        v += static_cast<double>(w.router_weight.at(std::int64_t{i} * s.hidden + h)) *
             static_cast<double>(x[t * s.hidden + h]);
      logit[static_cast<std::size_t>(i)] = v;
    }
    if (s.routing == mxmoe::RoutingMethod::hash)
      for (int j = 0; j < s.top_k; ++j)
        r.ids[static_cast<std::size_t>(t * s.top_k + j)] =
            static_cast<std::int32_t>(w.token_experts.at(token_ids[t], j));
    route_token(s, logit, bias, r.ids.data() + t * s.top_k, r.weights.data() + t * s.top_k);
  }
  return r;
}

// out += scale * expert(xq), rounding the activation to `format` like the backends. W: an
// Mxfp4View (expert e) or the shared expert's DenseMatrixView.
template <class W>
inline void expert(const mxmoe::LayerSpec& s, const W& w1, const mxmoe::DenseView& b1, const W& w2,
                   const mxmoe::DenseView& b2, std::int64_t e, const std::vector<float>& xq,
                   std::optional<mxmoe::ActivationFormat> format, double scale, double* out) {
  const std::int64_t inter = w2.cols, hidden = w2.rows;
  std::vector<double> h(static_cast<std::size_t>(2 * inter));
  for (std::int64_t r = 0; r < 2 * inter; ++r) {
    const std::vector<double> wr = row(w1, e, r);
    double v = b1.empty() ? 0.0 : static_cast<double>(b1.at(e * 2 * inter + r));
    for (std::int64_t i = 0; i < hidden; ++i)
      v += wr[static_cast<std::size_t>(i)] * static_cast<double>(xq[static_cast<std::size_t>(i)]);
    h[static_cast<std::size_t>(r)] = v;
  }
  const bool interleaved = s.gate_up_layout == mxmoe::GateUpLayout::interleaved;
  std::vector<float> a(static_cast<std::size_t>(inter));
  std::vector<double> ad(a.size());
  for (std::int64_t i = 0; i < inter; ++i) {
    const double g = h[static_cast<std::size_t>(interleaved ? 2 * i : i)];
    const double u = h[static_cast<std::size_t>(interleaved ? 2 * i + 1 : inter + i)];
    ad[static_cast<std::size_t>(i)] = act(s, g, u);
    a[static_cast<std::size_t>(i)] = static_cast<float>(ad[static_cast<std::size_t>(i)]);
  }
  if (format) {
    round_to(format, a);
    for (std::size_t i = 0; i < a.size(); ++i) ad[i] = static_cast<double>(a[i]);
  }
  for (std::int64_t r = 0; r < hidden; ++r) {
    const std::vector<double> wr = row(w2, e, r);
    double v = b2.empty() ? 0.0 : static_cast<double>(b2.at(e * hidden + r));
    for (std::int64_t i = 0; i < inter; ++i)
      v += wr[static_cast<std::size_t>(i)] * ad[static_cast<std::size_t>(i)];
    out[r] += scale * v;
  }
}

// The layer: y [M, H] for the given routing. format = nullopt: no rounding at all.
inline std::vector<double> layer(const mxmoe::LayerSpec& s, const mxmoe::LayerWeights& w,
                                 const std::vector<float>& x, const Routing& r,
                                 std::optional<mxmoe::ActivationFormat> format) {
  const std::int64_t tokens = static_cast<std::int64_t>(x.size()) / s.hidden;
  std::vector<double> y(x.size(), 0.0);
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::vector<float> xq(x.begin() + t * s.hidden, x.begin() + (t + 1) * s.hidden);
    round_to(format, xq);
    double* yt = y.data() + t * s.hidden;
    for (int j = 0; j < s.top_k; ++j) {
      const auto slot = static_cast<std::size_t>(t * s.top_k + j);
      expert(s, w.w1, w.b1, w.w2, w.b2, r.ids[slot], xq, format,
             static_cast<double>(r.weights[slot]), yt);
    }
    if (s.shared_experts > 0 && s.shared_weight_format == mxmoe::ElementType::mxfp4)
      expert(s, w.shared_w1, mxmoe::DenseView{}, w.shared_w2, mxmoe::DenseView{}, 0, xq, format,
             1.0, yt);
    else if (s.shared_experts > 0)
      expert(s, w.shared_dense_w1, mxmoe::DenseView{}, w.shared_dense_w2, mxmoe::DenseView{}, 0, xq,
             format, 1.0, yt);
  }
  return y;
}

template <class A, class B>
double relative_l2(const std::vector<A>& got, const std::vector<B>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    num += d * d;
    den += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  return std::sqrt(num / den);
}

}  // namespace naive
