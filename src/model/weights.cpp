// The LayerWeights views: reading a DenseView or DenseMatrixView element (and refusing an
// element type the view cannot hold), building and slicing MXFP4 segment tables, and narrowing
// a layer to a range of experts. The checks are in validate_weights.cpp, the in-memory
// random layer in random_weights.cpp.
#include "mxmoe/weights.hpp"

#include <fmt/core.h>

#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "model/dense_view.hpp"

namespace mxmoe {

void refuse_element(std::string_view view, std::string_view holds, ElementType t,
                    std::string_view tensor) {
  throw std::invalid_argument(fmt::format("{}{}a {} holds {}, not {}", tensor,
                                          tensor.empty() ? "" : ": ", view, holds, to_string(t)));
}

DenseView::DenseView(ElementType dtype_, const void* data_, std::int64_t rows_, std::int64_t cols_)
    : dtype(dtype_), data(data_), rows(rows_), cols(cols_) {
  if (!holds(dtype)) refuse_element("DenseView", kDenseViewHolds, dtype);
}

std::size_t DenseView::element_bytes() const {
  if (!holds(dtype)) refuse_element("DenseView", kDenseViewHolds, dtype);
  return static_cast<std::size_t>(element_bits(dtype) / 8);
}

float DenseView::at(std::int64_t i) const {
  switch (dtype) {
    case ElementType::f32:
      return static_cast<const float*>(data)[i];
    case ElementType::bf16:
      return bf16_to_f32(static_cast<const std::uint16_t*>(data)[i]);
    case ElementType::fp8_e4m3:
    case ElementType::mxfp4:
      break;
  }
  refuse_element("DenseView", kDenseViewHolds, dtype);
}

std::vector<float> to_floats(const DenseView& v) {
  std::vector<float> out(static_cast<std::size_t>(v.empty() ? 0 : v.rows * v.cols));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = v.at(static_cast<std::int64_t>(i));
  return out;
}

std::optional<std::size_t> first_non_finite(ElementType dtype, const void* data,
                                            std::size_t count) {
  if (!DenseView::holds(dtype)) refuse_element("DenseView", kDenseViewHolds, dtype);
  const auto* bytes = static_cast<const std::byte*>(data);
  for (std::size_t i = 0; i < count; ++i) {
    if (dtype == ElementType::bf16) {
      std::uint16_t v;
      std::memcpy(&v, bytes + 2 * i, 2);
      if ((v & 0x7F80u) == 0x7F80u) return i;
    } else {
      std::uint32_t v;
      std::memcpy(&v, bytes + 4 * i, 4);
      if ((v & 0x7F800000u) == 0x7F800000u) return i;
    }
  }
  return std::nullopt;
}

namespace {

DenseView slice_dense_rows(const DenseView& v, ExpertRange r) {
  if (v.empty()) return v;
  DenseView s = v;
  const std::size_t element = v.element_bytes();
  s.data = static_cast<const std::byte*>(v.data) +
           static_cast<std::size_t>(r.begin) * static_cast<std::size_t>(v.cols) * element;
  s.rows = r.size();
  return s;
}

}  // namespace

Mxfp4View Mxfp4View::contiguous(const std::uint8_t* blocks, const std::uint8_t* scales,
                                std::int64_t experts, std::int64_t rows, std::int64_t cols) {
  std::vector<Mxfp4Segment> table(static_cast<std::size_t>(experts));
  for (std::int64_t e = 0; e < experts; ++e)
    table[static_cast<std::size_t>(e)] = {blocks + e * rows * (cols / 2),
                                          scales + e * rows * (cols / 32)};
  return segmented(std::move(table), 1, experts, rows, cols);
}

Mxfp4View Mxfp4View::segmented(std::vector<Mxfp4Segment> table, int parts, std::int64_t experts,
                               std::int64_t rows, std::int64_t cols) {
  if (parts < 1 || rows % parts != 0 || table.size() != static_cast<std::size_t>(experts * parts))
    throw std::invalid_argument(
        fmt::format("Mxfp4View: {} segments for {} experts x {} parts of {} rows", table.size(),
                    experts, parts, rows));
  Mxfp4View v;
  v.experts = experts;
  v.rows = rows;
  v.cols = cols;
  v.parts = parts;
  v.segments = std::make_shared<const std::vector<Mxfp4Segment>>(std::move(table));
  return v;
}

Mxfp4View Mxfp4View::slice(ExpertRange range) const noexcept {
  if (empty()) return *this;
  Mxfp4View s = *this;
  s.first = first + range.begin;
  s.experts = range.size();
  return s;
}

double DenseMatrixView::value(std::int64_t r, std::int64_t c) const {
  const std::int64_t n = segment_rows();
  const Segment& g = segment[r / n];
  const std::int64_t row = r % n;
  const std::int64_t i = row * cols + c;
  switch (element) {
    case ElementType::f32:
      return static_cast<const float*>(g.data)[i];
    case ElementType::bf16:
      return bf16_to_f32(static_cast<const std::uint16_t*>(g.data)[i]);
    case ElementType::fp8_e4m3: {
      const std::int64_t b = row / kScaleBlock * scale_cols() + c / kScaleBlock;
      const double scale =
          scale_e8m0
              ? static_cast<double>(e8m0_decode(static_cast<const std::uint8_t*>(g.scales)[b]))
              : static_cast<double>(static_cast<const float*>(g.scales)[b]);
      return static_cast<double>(e4m3_decode(static_cast<const std::uint8_t*>(g.data)[i])) * scale;
    }
    case ElementType::mxfp4:
      break;
  }
  refuse_element("DenseMatrixView", kDenseMatrixViewHolds, element);
}

std::size_t DenseMatrixView::bytes() const {
  const auto n = static_cast<std::size_t>(rows * cols);
  switch (element) {
    case ElementType::f32:
      return 4 * n;
    case ElementType::bf16:
      return 2 * n;
    case ElementType::fp8_e4m3:
      return n +
             static_cast<std::size_t>(parts * scale_rows() * scale_cols()) * (scale_e8m0 ? 1 : 4);
    case ElementType::mxfp4:
      break;
  }
  refuse_element("DenseMatrixView", kDenseMatrixViewHolds, element);
}

LayerWeights slice_experts(const LayerWeights& w, ExpertRange range) {
  const std::int64_t experts = w.w1.experts;
  if (range.begin < 0 || range.end < range.begin || range.end > experts ||
      w.w2.experts != experts || (!w.b1.empty() && w.b1.rows != experts) ||
      (!w.b2.empty() && w.b2.rows != experts))
    throw std::invalid_argument(
        fmt::format("slice_experts: experts [{}, {}) do not lie within the layer's {} experts",
                    range.begin, range.end, experts));
  LayerWeights s = w;
  s.w1 = w.w1.slice(range);
  s.w2 = w.w2.slice(range);
  s.b1 = slice_dense_rows(w.b1, range);
  s.b2 = slice_dense_rows(w.b2, range);
  return s;
}

}  // namespace mxmoe
