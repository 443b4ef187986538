// validate(spec, weights): every LayerWeights view checked against its LayerSpec (shapes,
// presence, values that are not finite, the hash routing table), naming the tensor at fault.
// Declared in mxmoe/weights.hpp and, with the names the messages give the tensors,
// validate_weights.hpp; the spec alone is validate_spec.cpp's.
#include <fmt/core.h>

#include <cmath>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "model/dense_view.hpp"
#include "model/validate_weights.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

namespace {

std::string shape_text(std::int64_t a, std::int64_t b) {
  return fmt::format("[{}, {}]", a, b);
}

// Shape and presence always; the values (NaN, Inf) of every row, or of the rows (experts) of
// SCAN only when given (an expert-parallel rank reads no page of another rank's biases).
void check_dense(std::string_view name, const DenseView& v, bool required, std::int64_t rows,
                 std::int64_t cols, const std::span<const ExpertRange>* scan = nullptr) {
  if (v.empty()) {
    if (required)
      throw std::invalid_argument(
          fmt::format("{} is missing (the spec needs {})", name, shape_text(rows, cols)));
    return;
  }
  if (!required)
    throw std::invalid_argument(fmt::format("{} is present but the spec has none", name));
  if (!DenseView::holds(v.dtype)) refuse_element("DenseView", kDenseViewHolds, v.dtype, name);
  if (v.rows != rows || v.cols != cols)
    throw std::invalid_argument(fmt::format("{} has shape {}, the spec needs {}", name,
                                            shape_text(v.rows, v.cols), shape_text(rows, cols)));
  const ExpertRange all{0, static_cast<int>(rows)};
  const std::span<const ExpertRange> ranges = scan != nullptr ? *scan : std::span(&all, 1);
  const std::size_t element = v.element_bytes();
  for (const ExpertRange& r : ranges) {
    const auto first = static_cast<std::size_t>(r.begin) * static_cast<std::size_t>(cols);
    const auto bad =
        first_non_finite(v.dtype, static_cast<const std::byte*>(v.data) + first * element,
                         static_cast<std::size_t>(r.size()) * static_cast<std::size_t>(cols));
    if (bad)
      throw std::invalid_argument(fmt::format("{} holds NaN or Inf at row {}, column {}", name,
                                              static_cast<std::int64_t>(first + *bad) / cols,
                                              static_cast<std::int64_t>(first + *bad) % cols));
  }
}

// Shapes always; the NaN scale 0xFF only in the experts of `scan` (a rank of an
// expert-parallel group reads no page of the experts it does not hold).
void check_mxfp4(std::string_view name, const Mxfp4View& v, std::int64_t experts, std::int64_t rows,
                 std::int64_t cols, std::span<const ExpertRange> scan) {
  const std::string want = fmt::format("[{}, {}, {}]", experts, rows, cols);
  if (v.empty())
    throw std::invalid_argument(fmt::format("{} is missing (the spec needs {})", name, want));
  if (v.experts != experts || v.rows != rows || v.cols != cols)
    throw std::invalid_argument(fmt::format("{} has shape [{}, {}, {}], the spec needs {}", name,
                                            v.experts, v.rows, v.cols, want));
  if (v.parts < 1 || rows % v.parts != 0 ||
      v.segments->size() < static_cast<std::size_t>((v.first + experts) * v.parts))
    throw std::invalid_argument(
        fmt::format("{}: {} segments per expert do not split its {} rows", name, v.parts, rows));
  const std::int64_t seg_rows = v.segment_rows();
  const auto count = static_cast<std::size_t>(seg_rows * v.row_scales());
  for (std::int64_t e = 0; e < experts; ++e)
    for (int part = 0; part < v.parts; ++part)
      if (v.segment(e, part).blocks == nullptr || v.segment(e, part).scales == nullptr)
        throw std::invalid_argument(
            fmt::format("{}: expert {} (rows from {}) has no data", name, e, part * seg_rows));
  for (const ExpertRange& r : scan) {
    for (std::int64_t e = r.begin; e < r.end; ++e) {
      for (int part = 0; part < v.parts; ++part) {
        const Mxfp4Segment& g = v.segment(e, part);
        const void* nan = std::memchr(g.scales, kE8m0Nan, count);
        if (nan == nullptr) continue;
        const auto at = static_cast<std::int64_t>(static_cast<const std::uint8_t*>(nan) - g.scales);
        throw std::invalid_argument(
            fmt::format("{} has the NaN scale 0xFF at expert {}, row {}, block {}", name, e,
                        part * seg_rows + at / v.row_scales(), at % v.row_scales()));
      }
    }
  }
}

void check_dense_matrix(const char* name, const DenseMatrixView& v, std::int64_t rows,
                        std::int64_t cols) {
  if (v.empty())
    throw std::invalid_argument(
        fmt::format("{} is missing (the spec needs {})", name, shape_text(rows, cols)));
  if (!DenseMatrixView::holds(v.element))
    refuse_element("DenseMatrixView", kDenseMatrixViewHolds, v.element, name);
  if (v.rows != rows || v.cols != cols)
    throw std::invalid_argument(fmt::format("{} has shape {}, the spec needs {}", name,
                                            shape_text(v.rows, v.cols), shape_text(rows, cols)));
  if ((v.parts != 1 && v.parts != 2) || rows % v.parts != 0)
    throw std::invalid_argument(
        fmt::format("{}: {} segments do not split its {} rows", name, v.parts, rows));
  const std::int64_t seg_rows = v.segment_rows();
  const auto n = static_cast<std::size_t>(seg_rows * cols);
  for (int part = 0; part < v.parts; ++part) {
    const DenseMatrixView::Segment& g = v.segment[part];
    if (g.data == nullptr || (v.element == ElementType::fp8_e4m3 && g.scales == nullptr))
      throw std::invalid_argument(
          fmt::format("{}: rows from {} have no data", name, part * seg_rows));
    const auto bad = [&](std::size_t i, const char* what) {
      const auto flat = static_cast<std::int64_t>(i);
      throw std::invalid_argument(fmt::format("{} holds {} at row {}, column {}", name, what,
                                              part * seg_rows + flat / cols, flat % cols));
    };
    switch (v.element) {
      case ElementType::f32:
      case ElementType::bf16: {
        if (const auto i = first_non_finite(v.element, g.data, n)) bad(*i, "NaN or Inf");
        break;
      }
      case ElementType::fp8_e4m3: {
        const auto* codes = static_cast<const std::uint8_t*>(g.data);
        for (std::size_t i = 0; i < n; ++i)
          if ((codes[i] & 0x7Fu) == 0x7Fu) bad(i, "the E4M3 NaN code");
        const auto blocks = static_cast<std::size_t>(v.scale_rows() * v.scale_cols());
        for (std::size_t b = 0; b < blocks; ++b) {
          const bool nan = v.scale_e8m0 ? static_cast<const std::uint8_t*>(g.scales)[b] == kE8m0Nan
                                        : !std::isfinite(static_cast<const float*>(g.scales)[b]);
          if (nan) {
            const auto sc = static_cast<std::size_t>(v.scale_cols());
            throw std::invalid_argument(fmt::format(
                "{} has a NaN or Inf block scale at rows from {}, columns from {}", name,
                part * seg_rows + static_cast<std::int64_t>(b / sc) * DenseMatrixView::kScaleBlock,
                static_cast<std::int64_t>(b % sc) * DenseMatrixView::kScaleBlock));
          }
        }
        break;
      }
      case ElementType::mxfp4:  // refused above
        break;
    }
  }
}

void check_token_experts(const TokenExpertTable& t, std::int64_t vocab, std::int64_t top_k,
                         std::int64_t experts) {
  if (t.empty())
    throw std::invalid_argument(fmt::format(
        "token_experts (tid2eid) is missing (the spec needs {})", shape_text(vocab, top_k)));
  if (t.vocab != vocab || t.top_k != top_k)
    throw std::invalid_argument(fmt::format("token_experts has shape {}, the spec needs {}",
                                            shape_text(t.vocab, t.top_k),
                                            shape_text(vocab, top_k)));
  for (std::int64_t token = 0; token < vocab; ++token) {
    for (std::int64_t j = 0; j < top_k; ++j) {
      const std::int64_t id = t.at(token, j);
      if (id < 0 || id >= experts)
        throw std::invalid_argument(
            fmt::format("token_experts: token {} slot {} names expert {}, outside [0, {})", token,
                        j, id, experts));
      for (std::int64_t i = 0; i < j; ++i)
        if (t.at(token, i) == id)
          throw std::invalid_argument(fmt::format(
              "token_experts: token {} names expert {} twice (slots {} and {})", token, id, i, j));
    }
  }
}

}  // namespace

void validate(const LayerSpec& spec, const LayerWeights& w) {
  const ExpertRange all{0, spec.num_experts};
  validate(spec, w, std::span<const ExpertRange>(&all, 1));
}

void validate(const LayerSpec& spec, const LayerWeights& w, std::span<const ExpertRange> scan) {
  validate(spec, w, scan, WeightNames{});
}

void validate(const LayerSpec& spec, const LayerWeights& w, std::span<const ExpertRange> scan,
              const WeightNames& names) {
  validate(spec);
  for (const ExpertRange& r : scan)
    if (r.begin < 0 || r.end < r.begin || r.end > spec.num_experts)
      throw std::invalid_argument(
          fmt::format("experts [{}, {}) to check do not lie within the "
                      "layer's {} experts",
                      r.begin, r.end, spec.num_experts));
  const ExpertRange one{0, 1};
  const std::span<const ExpertRange> shared(&one, 1);
  const std::int64_t e = spec.num_experts, h = spec.hidden, i = spec.intermediate;
  if (!w.router_weight.empty()) {
    check_dense(names.router_weight, w.router_weight, true, e, h);
    check_dense(names.router_bias, w.router_bias, spec.router_bias, 1, e);
  } else if (!w.router_bias.empty()) {
    check_dense(names.router_bias, w.router_bias, spec.router_bias, 1, e);
  }
  check_dense(names.selection_bias, w.selection_bias, spec.routing_params.selection_bias, 1, e);
  if (spec.routing == RoutingMethod::hash)
    check_token_experts(w.token_experts, spec.vocab, spec.top_k, e);
  else if (!w.token_experts.empty())
    throw std::invalid_argument(
        "token_experts (tid2eid) is present but the layer is not hash-routed");
  check_mxfp4(names.w1, w.w1, e, 2 * i, h, scan);
  check_dense(names.b1, w.b1, spec.expert_bias, e, 2 * i, &scan);
  check_mxfp4(names.w2, w.w2, e, h, i, scan);
  check_dense(names.b2, w.b2, spec.expert_bias, e, h, &scan);
  const bool dense_shared = spec.shared_weight_format != ElementType::mxfp4;
  const std::int64_t is = spec.shared_intermediate;
  if (spec.shared_experts > 0 && !dense_shared) {
    check_mxfp4("shared_w1", w.shared_w1, 1, 2 * is, h, shared);
    check_mxfp4("shared_w2", w.shared_w2, 1, h, is, shared);
  } else if (spec.shared_experts > 0) {
    check_dense_matrix("shared_w1", w.shared_dense_w1, 2 * is, h);
    check_dense_matrix("shared_w2", w.shared_dense_w2, h, is);
    const ElementType want = spec.shared_weight_format;
    if (w.shared_dense_w1.element != want || w.shared_dense_w2.element != want)
      throw std::invalid_argument(
          fmt::format("shared_w1/shared_w2 are not stored as the spec's shared_weight_format {}",
                      to_string(spec.shared_weight_format)));
    if (spec.gate_up_layout == GateUpLayout::interleaved && w.shared_dense_w1.parts != 1)
      throw std::invalid_argument("shared_w1 in two segments needs the halves gate/up layout");
  }
  if (spec.shared_experts == 0 && (!w.shared_w1.empty() || !w.shared_w2.empty() ||
                                   !w.shared_dense_w1.empty() || !w.shared_dense_w2.empty()))
    throw std::invalid_argument(
        "shared_w1/shared_w2 are present but the spec has no shared expert");
  if (spec.shared_experts > 0 && dense_shared && (!w.shared_w1.empty() || !w.shared_w2.empty()))
    throw std::invalid_argument(
        "MXFP4 shared_w1/shared_w2 are present but the spec's shared "
        "expert is " +
        std::string(to_string(spec.shared_weight_format)));
  if (spec.shared_experts > 0 && !dense_shared &&
      (!w.shared_dense_w1.empty() || !w.shared_dense_w2.empty()))
    throw std::invalid_argument(
        "dense shared_w1/shared_w2 are present but the spec's shared "
        "expert is mxfp4");
  if (w.w1.parts != 1 && spec.gate_up_layout == GateUpLayout::interleaved)
    throw std::invalid_argument(
        fmt::format("{} in separate gate/up segments needs the halves gate/up layout", names.w1));
}

}  // namespace mxmoe
