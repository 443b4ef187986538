// LayerWeights checks and the in-memory random layer (embedded default, tests, benchmarks).
#include "mxmoe/weights.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>

namespace mxmoe {

float DenseView::at(std::int64_t i) const noexcept {
  if (dtype == DType::f32) return static_cast<const float*>(data)[i];
  return bf16_to_f32(static_cast<const std::uint16_t*>(data)[i]);
}

namespace {

Mxfp4View slice_mxfp4(const Mxfp4View& v, ExpertRange r) {
  if (v.empty()) return v;
  Mxfp4View s = v;
  s.blocks = v.blocks + static_cast<std::size_t>(r.begin * v.rows * v.row_bytes());
  s.scales = v.scales + static_cast<std::size_t>(r.begin * v.rows * v.row_scales());
  s.experts = r.size();
  return s;
}

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

void check_dense(const char* name, const DenseView& v, bool required, std::int64_t rows,
                 std::int64_t cols) {
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
}

// Shapes always; the NaN scale 0xFF only in the experts of `scan` (a rank of an
// expert-parallel group reads no page of the experts it does not hold).
void check_mxfp4(const char* name, const Mxfp4View& v, std::int64_t experts, std::int64_t rows,
                 std::int64_t cols, std::span<const ExpertRange> scan) {
  const std::string want = fmt::format("[{}, {}, {}]", experts, rows, cols);
  if (v.empty() || v.scales == nullptr)
    throw std::invalid_argument(fmt::format("{} is missing (the spec needs {})", name, want));
  if (v.experts != experts || v.rows != rows || v.cols != cols)
    throw std::invalid_argument(fmt::format("{} has shape [{}, {}, {}], the spec needs {}", name,
                                            v.experts, v.rows, v.cols, want));
  const std::int64_t per_expert = rows * v.row_scales();
  for (const ExpertRange& r : scan) {
    const std::uint8_t* begin = v.scales + r.begin * per_expert;
    const auto count = static_cast<std::size_t>(r.size() * per_expert);
    if (const void* nan = std::memchr(begin, kE8m0Nan, count)) {
      const auto at = static_cast<std::int64_t>(static_cast<const std::uint8_t*>(nan) - v.scales);
      throw std::invalid_argument(
          fmt::format("{} has the NaN scale 0xFF at expert {}, row {}, block {}", name,
                      at / per_expert, at % per_expert / v.row_scales(), at % v.row_scales()));
    }
  }
}

// splitmix64: tiny, fast, and good enough to make weights that exercise every code.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float symmetric() noexcept {
    return static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-52 - 1.0);
  }

 private:
  std::uint64_t state_;
};

class Builder {
 public:
  Builder(std::vector<std::vector<std::byte>>& buffers, std::uint64_t seed)
      : buffers_(buffers), rng_(seed) {}

  // Values uniform in [-scale, scale).
  DenseView dense(std::int64_t rows, std::int64_t cols, float scale) {
    float* p = alloc<float>(rows * cols);
    for (std::int64_t i = 0; i < rows * cols; ++i) p[i] = scale * rng_.symmetric();
    return DenseView{DType::f32, p, rows, cols};
  }

  // Random E2M1 codes (all 16 equally likely) and E8M0 scales spread over 2^(c-1)..2^(c+1)
  // where 2^c ~ 1 / (rms(E2M1) * sqrt(cols)): a row's dot product with a unit-variance input
  // is then O(1) whatever the width.
  Mxfp4View mxfp4(std::int64_t experts, std::int64_t rows, std::int64_t cols) {
    Mxfp4View v{nullptr, nullptr, experts, rows, cols};
    const std::int64_t count = experts * rows;
    auto* blocks = alloc<std::uint8_t>(count * v.row_bytes());
    auto* scales = alloc<std::uint8_t>(count * v.row_scales());
    const std::int64_t nbytes = count * v.row_bytes();
    for (std::int64_t i = 0; i < nbytes; i += 8) {
      const std::uint64_t r = rng_.next();
      const auto n = static_cast<std::size_t>(std::min<std::int64_t>(8, nbytes - i));
      std::memcpy(blocks + i, &r, n);
    }
    constexpr double kE2m1Rms = 2.9261;  // sqrt(mean of the 16 codes' squared values)
    const int center =
        static_cast<int>(std::lround(-std::log2(kE2m1Rms * std::sqrt(static_cast<double>(cols)))));
    for (std::int64_t i = 0; i < count * v.row_scales(); ++i)
      scales[i] = static_cast<std::uint8_t>(127 + center - 1 + static_cast<int>(rng_.next() % 3));
    v.blocks = blocks;
    v.scales = scales;
    return v;
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

void validate(const LayerSpec& spec, const LayerWeights& w) {
  const ExpertRange all{0, spec.num_experts};
  validate(spec, w, std::span<const ExpertRange>(&all, 1));
}

void validate(const LayerSpec& spec, const LayerWeights& w, std::span<const ExpertRange> scan) {
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
    check_dense("router_weight", w.router_weight, true, e, h);
    check_dense("router_bias", w.router_bias, spec.router_bias, 1, e);
  } else if (!w.router_bias.empty()) {
    check_dense("router_bias", w.router_bias, spec.router_bias, 1, e);
  }
  check_dense("selection_bias", w.selection_bias, spec.routing_params.selection_bias, 1, e);
  check_mxfp4("w1", w.w1, e, 2 * i, h, scan);
  check_dense("b1", w.b1, spec.expert_bias, e, 2 * i);
  check_mxfp4("w2", w.w2, e, h, i, scan);
  check_dense("b2", w.b2, spec.expert_bias, e, h);
  if (spec.shared_experts > 0) {
    check_mxfp4("shared_w1", w.shared_w1, 1, 2 * std::int64_t{spec.shared_intermediate}, h, shared);
    check_mxfp4("shared_w2", w.shared_w2, 1, h, spec.shared_intermediate, shared);
  } else if (!w.shared_w1.empty() || !w.shared_w2.empty()) {
    throw std::invalid_argument(
        "shared_w1/shared_w2 are present but the spec has no shared expert");
  }
}

LayerStorage LayerStorage::random(const LayerSpec& spec, std::uint64_t seed) {
  validate(spec);
  LayerStorage s;
  Builder b(s.buffers_, seed);
  const std::int64_t e = spec.num_experts, h = spec.hidden, i = spec.intermediate;
  LayerWeights& w = s.views_;
  // Router: logits ~ O(1) for unit-variance inputs (uniform weights of variance 1/H), so
  // the routing is spread over the experts and rarely tied.
  w.router_weight = b.dense(e, h, static_cast<float>(std::sqrt(3.0 / static_cast<double>(h))));
  if (spec.router_bias) w.router_bias = b.dense(1, e, 0.1f);
  if (spec.routing_params.selection_bias) w.selection_bias = b.dense(1, e, 0.05f);
  w.w1 = b.mxfp4(e, 2 * i, h);
  if (spec.expert_bias) w.b1 = b.dense(e, 2 * i, 0.1f);
  w.w2 = b.mxfp4(e, h, i);
  if (spec.expert_bias) w.b2 = b.dense(e, h, 0.1f);
  if (spec.shared_experts > 0) {
    w.shared_w1 = b.mxfp4(1, 2 * std::int64_t{spec.shared_intermediate}, h);
    w.shared_w2 = b.mxfp4(1, h, spec.shared_intermediate);
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
  s.w1 = slice_mxfp4(w.w1, range);
  s.w2 = slice_mxfp4(w.w2, range);
  s.b1 = slice_dense_rows(w.b1, range);
  s.b2 = slice_dense_rows(w.b2, range);
  return s;
}

}  // namespace mxmoe
