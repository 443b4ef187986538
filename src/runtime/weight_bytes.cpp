// weight_bytes (weight_bytes.hpp).
#include "runtime/weight_bytes.hpp"

#include <cstdint>
#include <string_view>

namespace mxmoe {

std::vector<ArrayBytes> weight_bytes(const LayerWeights& w, bool experts, bool shared,
                                     bool token_table) {
  std::vector<ArrayBytes> out;
  const auto add = [&](const char* name, const void* data, std::int64_t bytes) {
    if (data == nullptr || bytes <= 0) return;
    const ArrayBytes r = dense_bytes(name, data, static_cast<std::size_t>(bytes));
    if (!out.empty() && std::string_view(out.back().name) == name && out.back().end == r.begin)
      out.back().end = r.end;
    else
      out.push_back(r);
  };
  const auto mxfp4 = [&](const char* name, const Mxfp4View& v) {
    if (v.empty()) return;
    for (std::int64_t e = 0; e < v.experts; ++e)
      for (int p = 0; p < v.parts; ++p) {
        const Mxfp4Segment& seg = v.segment(e, p);
        add(name, seg.blocks, v.segment_rows() * v.row_bytes());
      }
    for (std::int64_t e = 0; e < v.experts; ++e)
      for (int p = 0; p < v.parts; ++p)
        add(name, v.segment(e, p).scales, v.segment_rows() * v.row_scales());
  };
  const auto dense = [&](const char* name, const DenseView& v) {
    if (!v.empty())
      add(name, v.data, v.rows * v.cols * static_cast<std::int64_t>(v.element_bytes()));
  };
  const auto matrix = [&](const char* name, const DenseMatrixView& v) {
    if (v.empty()) return;
    const std::int64_t scale_bytes = v.scale_rows() * v.scale_cols() * (v.scale_e8m0 ? 1 : 4);
    const std::int64_t element = v.element == ElementType::f32    ? 4
                                 : v.element == ElementType::bf16 ? 2
                                                                  : 1;
    for (int p = 0; p < v.parts; ++p) {
      add(name, v.segment[p].data, v.segment_rows() * v.cols * element);
      if (v.element == ElementType::fp8_e4m3) add(name, v.segment[p].scales, scale_bytes);
    }
  };
  if (experts) {
    mxfp4("w13 weights", w.w1);
    mxfp4("w2 weights", w.w2);
    dense("w13 bias", w.b1);
    dense("w2 bias", w.b2);
  }
  if (shared) {
    mxfp4("shared expert weights", w.shared_w1);
    mxfp4("shared expert weights", w.shared_w2);
    matrix("shared expert weights", w.shared_dense_w1);
    matrix("shared expert weights", w.shared_dense_w2);
  }
  if (token_table && !w.token_experts.empty())
    add("hash table tid2eid", w.token_experts.data,
        w.token_experts.vocab * w.token_experts.top_k * (w.token_experts.int64 ? 8 : 4));
  return out;
}

}  // namespace mxmoe
