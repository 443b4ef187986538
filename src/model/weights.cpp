// LayerWeights checks and the in-memory random layer (embedded default, tests, benchmarks).
#include "mxmoe/weights.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "format/e4m3_blocks.hpp"
#include "model/dense_view.hpp"
#include "model/generation_poll.hpp"
#include "model/random_weights.hpp"
#include "model/validate_weights.hpp"

namespace mxmoe {

float DenseView::at(std::int64_t i) const noexcept {
  if (dtype == DType::f32) return static_cast<const float*>(data)[i];
  return bf16_to_f32(static_cast<const std::uint16_t*>(data)[i]);
}

std::vector<float> to_floats(const DenseView& v) {
  std::vector<float> out(static_cast<std::size_t>(v.empty() ? 0 : v.rows * v.cols));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = v.at(static_cast<std::int64_t>(i));
  return out;
}

std::optional<std::size_t> first_non_finite(DType dtype, const void* data, std::size_t count) {
  const auto* bytes = static_cast<const std::byte*>(data);
  for (std::size_t i = 0; i < count; ++i) {
    if (dtype == DType::bf16) {
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
  const std::size_t element = v.dtype == DType::f32 ? 4 : 2;
  s.data = static_cast<const std::byte*>(v.data) +
           static_cast<std::size_t>(r.begin) * static_cast<std::size_t>(v.cols) * element;
  s.rows = r.size();
  return s;
}

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
  if (v.rows != rows || v.cols != cols)
    throw std::invalid_argument(fmt::format("{} has shape {}, the spec needs {}", name,
                                            shape_text(v.rows, v.cols), shape_text(rows, cols)));
  const ExpertRange all{0, static_cast<int>(rows)};
  const std::span<const ExpertRange> ranges = scan != nullptr ? *scan : std::span(&all, 1);
  const std::size_t element = v.dtype == DType::f32 ? 4 : 2;
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
    if (g.data == nullptr || (v.element == DenseElement::e4m3 && g.scales == nullptr))
      throw std::invalid_argument(
          fmt::format("{}: rows from {} have no data", name, part * seg_rows));
    const auto bad = [&](std::size_t i, const char* what) {
      const auto flat = static_cast<std::int64_t>(i);
      throw std::invalid_argument(fmt::format("{} holds {} at row {}, column {}", name, what,
                                              part * seg_rows + flat / cols, flat % cols));
    };
    switch (v.element) {
      case DenseElement::f32:
      case DenseElement::bf16: {
        const DType dtype = v.element == DenseElement::f32 ? DType::f32 : DType::bf16;
        if (const auto i = first_non_finite(dtype, g.data, n)) bad(*i, "NaN or Inf");
        break;
      }
      case DenseElement::e4m3: {
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

class Builder {
 public:
  static constexpr std::int64_t kPollBytes = std::int64_t{8} << 20;  // a multiple of 8

  Builder(std::vector<std::vector<std::byte>>& buffers, std::uint64_t seed)
      : buffers_(buffers), rng_(seed) {}

  // Values uniform in [-scale, scale).
  DenseView dense(std::int64_t rows, std::int64_t cols, float scale) {
    float* p = alloc<float>(rows * cols);
    for (std::int64_t i = 0; i < rows * cols; ++i) p[i] = scale * rng_.symmetric();
    return DenseView{DType::f32, p, rows, cols};
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
  DenseMatrixView dense_matrix(WeightFormat format, std::int64_t rows, std::int64_t cols,
                               int parts) {
    DenseMatrixView v;
    v.rows = rows;
    v.cols = cols;
    v.parts = parts;
    const std::int64_t seg_rows = rows / parts;
    const float amplitude = static_cast<float>(1.0 / std::sqrt(static_cast<double>(cols)));
    for (int p = 0; p < parts; ++p) {
      std::vector<float> values(static_cast<std::size_t>(seg_rows * cols));
      for (float& x : values) x = amplitude * rng_.symmetric();
      DenseMatrixView::Segment& g = v.segment[p];
      if (format == WeightFormat::f32) {
        v.element = DenseElement::f32;
        float* d = alloc<float>(seg_rows * cols);
        std::copy(values.begin(), values.end(), d);
        g.data = d;
      } else if (format == WeightFormat::bf16) {
        v.element = DenseElement::bf16;
        auto* d = alloc<std::uint16_t>(seg_rows * cols);
        for (std::size_t i = 0; i < values.size(); ++i) d[i] = f32_to_bf16(values[i]);
        g.data = d;
      } else {
        v.element = DenseElement::e4m3;
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

double DenseMatrixView::value(std::int64_t r, std::int64_t c) const noexcept {
  const std::int64_t n = segment_rows();
  const Segment& g = segment[r / n];
  const std::int64_t row = r % n;
  const std::int64_t i = row * cols + c;
  switch (element) {
    case DenseElement::f32:
      return static_cast<const float*>(g.data)[i];
    case DenseElement::bf16:
      return bf16_to_f32(static_cast<const std::uint16_t*>(g.data)[i]);
    case DenseElement::e4m3: {
      const std::int64_t b = row / kScaleBlock * scale_cols() + c / kScaleBlock;
      const double scale =
          scale_e8m0
              ? static_cast<double>(e8m0_decode(static_cast<const std::uint8_t*>(g.scales)[b]))
              : static_cast<double>(static_cast<const float*>(g.scales)[b]);
      return static_cast<double>(e4m3_decode(static_cast<const std::uint8_t*>(g.data)[i])) * scale;
    }
  }
  return 0;
}

std::size_t DenseMatrixView::bytes() const noexcept {
  const auto n = static_cast<std::size_t>(rows * cols);
  switch (element) {
    case DenseElement::f32:
      return 4 * n;
    case DenseElement::bf16:
      return 2 * n;
    case DenseElement::e4m3:
      return n +
             static_cast<std::size_t>(parts * scale_rows() * scale_cols()) * (scale_e8m0 ? 1 : 4);
  }
  return 0;
}

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
  const bool dense_shared = spec.shared_weight_format != WeightFormat::mxfp4;
  const std::int64_t is = spec.shared_intermediate;
  if (spec.shared_experts > 0 && !dense_shared) {
    check_mxfp4("shared_w1", w.shared_w1, 1, 2 * is, h, shared);
    check_mxfp4("shared_w2", w.shared_w2, 1, h, is, shared);
  } else if (spec.shared_experts > 0) {
    check_dense_matrix("shared_w1", w.shared_dense_w1, 2 * is, h);
    check_dense_matrix("shared_w2", w.shared_dense_w2, h, is);
    const DenseElement want = spec.shared_weight_format == WeightFormat::bf16  ? DenseElement::bf16
                              : spec.shared_weight_format == WeightFormat::f32 ? DenseElement::f32
                                                                               : DenseElement::e4m3;
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
    if (spec.shared_weight_format == WeightFormat::mxfp4) {
      w.shared_w1 = b.mxfp4(1, 2 * is, h, halves);
      w.shared_w2 = b.mxfp4(1, h, is);
    } else {
      w.shared_dense_w1 = b.dense_matrix(spec.shared_weight_format, 2 * is, h, halves);
      w.shared_dense_w2 = b.dense_matrix(spec.shared_weight_format, h, is, 1);
    }
  }
  return s;
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
