#include "io/deepseek_v4_layout.hpp"

#include <fmt/core.h>

#include <vector>

#include "io/layer_reader.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe::io {

namespace {

bool is_fp4_storage(StDtype d) {
  return d == StDtype::I8 || d == StDtype::U8 || d == StDtype::F4;
}

// One [rows, cols] MXFP4 projection stored as DeepSeek does: STEM.weight [rows, cols/2] I8/U8
// (or [rows, cols] F4) and STEM.scale [rows, cols/32] F8_E8M0/U8.
Mxfp4Segment fp4_matrix(const LayerReader& b, const std::string& stem, std::int64_t rows,
                        std::int64_t cols, bool scan) {
  const TensorRef& w = b.require(stem + ".weight");
  const TensorRef& s = b.require(stem + ".scale");
  LayerReader::expect_dtype(w, {StDtype::I8, StDtype::U8, StDtype::F4});
  LayerReader::expect_dtype(s, {StDtype::F8_E8M0, StDtype::U8});
  LayerReader::expect_shape(
      w, w.info->dtype == StDtype::F4 ? dims({rows, cols}) : dims({rows, cols / 2}));
  LayerReader::expect_shape(s, dims({rows, cols / 32}));
  if (scan) b.check_scales(s, rows, cols / 32);
  return {w.data().data(), s.data().data()};
}

// W1 (w1 gate rows, then w3 up rows: the halves layout) and W2 of experts [0, experts)
// under STEM (".experts.e" or ".shared_experts"); a routed expert's scales are scanned when
// it is one of the reader's experts.
void fp4_projections(const LayerReader& b, const std::string& stem, bool per_expert,
                     std::int64_t experts, std::int64_t hidden, std::int64_t inter, Mxfp4View& w1,
                     Mxfp4View& w2) {
  std::vector<Mxfp4Segment> t1, t2;
  for (std::int64_t e = 0; e < experts; ++e) {
    const std::string at = per_expert ? fmt::format("{}.{}.", stem, e) : stem + ".";
    const bool scan = per_expert ? b.scans_expert(e) : true;
    t1.push_back(fp4_matrix(b, at + "w1", inter, hidden, scan));
    t1.push_back(fp4_matrix(b, at + "w3", inter, hidden, scan));
    t2.push_back(fp4_matrix(b, at + "w2", hidden, inter, scan));
  }
  w1 = Mxfp4View::segmented(std::move(t1), 2, experts, 2 * inter, hidden);
  w2 = Mxfp4View::segmented(std::move(t2), 1, experts, hidden, inter);
}

// One dense projection of the shared expert in `format` (a segment of a DenseMatrixView).
DenseMatrixView::Segment dense_matrix(const LayerReader& b, const std::string& stem,
                                      ElementType format, std::int64_t rows, std::int64_t cols,
                                      DenseMatrixView& v) {
  const TensorRef& w = b.require(stem + ".weight");
  LayerReader::expect_shape(w, dims({rows, cols}));
  if (format != ElementType::fp8_e4m3) {
    LayerReader::expect_dtype(w, {format == ElementType::bf16 ? StDtype::BF16 : StDtype::F32});
    b.check_finite(w);
    v.element = format;
    b.reject_unexpected(stem + ".scale", "a " + std::string(to_string(format)) +
                                             " shared expert has no block scales");
    return {w.data().data(), nullptr};
  }
  LayerReader::expect_dtype(w, {StDtype::F8_E4M3});
  const TensorRef& s = b.require(stem + ".scale");
  LayerReader::expect_dtype(s, {StDtype::F8_E8M0, StDtype::U8, StDtype::F32});
  const std::int64_t block = DenseMatrixView::kScaleBlock;
  LayerReader::expect_shape(s, dims({(rows + block - 1) / block, (cols + block - 1) / block}));
  v.element = ElementType::fp8_e4m3;
  v.scale_e8m0 = s.info->dtype != StDtype::F32;
  return {w.data().data(), s.data().data()};
}

}  // namespace

std::optional<std::string> find_deepseek_v4_prefix(const TensorSet& set, int layer) {
  for (const std::string root : {"", "model."}) {
    const std::string prefix = fmt::format("{}layers.{}.ffn.", root, layer);
    if (set.find(prefix + "experts.0.w1.weight") != nullptr) return prefix;
  }
  return std::nullopt;
}

V4ExpertStorage deepseek_v4_expert_storage(const TensorSet& set, const std::string& prefix) {
  const TensorRef* w = set.find(prefix + "experts.0.w1.weight");
  if (w == nullptr) throw LoadError("missing tensor \"" + prefix + "experts.0.w1.weight\"");
  const StDtype d = w->info->dtype;
  if (d == StDtype::BF16 || d == StDtype::F32 || d == StDtype::F16) return V4ExpertStorage::dense;
  if (d == StDtype::F8_E4M3) return V4ExpertStorage::fp8;
  return V4ExpertStorage::mxfp4;
}

ElementType deepseek_v4_shared_format(const TensorSet& set, const std::string& prefix) {
  const std::string name = prefix + "shared_experts.w1.weight";
  const TensorRef* w = set.find(name);
  if (w == nullptr) throw LoadError("missing tensor \"" + name + "\"");
  if (const std::optional<ElementType> type = element_type(w->info->dtype)) return *type;
  if (is_fp4_storage(w->info->dtype)) return ElementType::mxfp4;
  throw LoadError(
      fmt::format("{}: tensor \"{}\" has dtype {}; a shared expert is read as FP8 "
                  "E4M3, BF16, F32 or MXFP4 (I8/U8/F4 with .scale)",
                  w->file->path(), name, to_string(w->info->dtype)));
}

LayerWeights bind_deepseek_v4_layer(const TensorSet& set, const LayerSpec& spec,
                                    const std::string& prefix, bool check_values,
                                    const std::vector<ExpertRange>* scale_experts) {
  const LayerReader b(set, prefix, check_values, scale_experts);
  const std::int64_t e = spec.num_experts, h = spec.hidden, i = spec.intermediate;
  LayerWeights w;
  w.router_weight = b.dense("gate.weight", e, h, false);
  if (spec.routing == RoutingMethod::hash) {
    const TensorRef& t = b.require("gate.tid2eid");
    LayerReader::expect_dtype(t, {StDtype::I32, StDtype::I64});
    LayerReader::expect_shape(t, dims({spec.vocab, spec.top_k}));
    w.token_experts = {t.data().data(), t.info->dtype == StDtype::I64, spec.vocab, spec.top_k};
    b.reject_unexpected("gate.bias", "a hash-routed layer has no selection bias");
  } else {
    w.selection_bias = b.dense("gate.bias", 1, e, true);
    b.reject_unexpected("gate.tid2eid", "the layer is not hash-routed (mlp_layer_types)");
  }
  fp4_projections(b, "experts", true, e, h, i, w.w1, w.w2);
  if (spec.shared_experts > 0) {
    const std::int64_t is = spec.shared_intermediate;
    if (spec.shared_weight_format == ElementType::mxfp4) {
      fp4_projections(b, "shared_experts", false, 1, h, is, w.shared_w1, w.shared_w2);
    } else {
      DenseMatrixView& d1 = w.shared_dense_w1;
      DenseMatrixView& d2 = w.shared_dense_w2;
      d1.rows = 2 * is;
      d1.cols = h;
      d1.parts = 2;
      d1.segment[0] = dense_matrix(b, "shared_experts.w1", spec.shared_weight_format, is, h, d1);
      const bool e8m0 = d1.scale_e8m0;
      d1.segment[1] = dense_matrix(b, "shared_experts.w3", spec.shared_weight_format, is, h, d1);
      d2.rows = h;
      d2.cols = is;
      d2.segment[0] = dense_matrix(b, "shared_experts.w2", spec.shared_weight_format, h, is, d2);
      if (d1.scale_e8m0 != e8m0 || d2.scale_e8m0 != e8m0)
        throw LoadError(prefix + "shared_experts: w1, w3 and w2 mix E8M0 and F32 block scales");
    }
  }
  return w;
}

}  // namespace mxmoe::io
