#include "io/gpt_oss_layout.hpp"

#include <fmt/core.h>

#include "io/layer_reader.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe::io {

namespace {

// blocks [E, rows, cols/32, 16] U8 and scales [E, rows, cols/32] U8; ROUTED: the scales
// scanned are only the reader's experts (the shared expert's are always scanned).
Mxfp4View mxfp4(const LayerReader& b, const std::string& stem, std::int64_t experts,
                std::int64_t rows, std::int64_t cols, bool routed) {
  const TensorRef& blocks = b.require(stem + "_blocks");
  const TensorRef& scales = b.require(stem + "_scales");
  LayerReader::expect_dtype(blocks, {StDtype::U8});
  LayerReader::expect_dtype(scales, {StDtype::U8});
  const std::int64_t nb = cols / 32;
  LayerReader::expect_shape(blocks, dims({experts, rows, nb, 16}));
  LayerReader::expect_shape(scales, dims({experts, rows, nb}));
  if (routed)
    b.check_expert_scales(scales, experts, rows, nb);
  else
    b.check_scales(scales, rows, nb);
  return Mxfp4View::contiguous(blocks.data().data(), scales.data().data(), experts, rows, cols);
}

}  // namespace

LayerWeights bind_gpt_oss_layer(const TensorSet& set, const LayerSpec& spec, int layer,
                                bool check_values,
                                const std::vector<ExpertRange>* scale_experts) {
  const LayerReader b(set, fmt::format("model.layers.{}.mlp.", layer), check_values,
                      scale_experts);
  const std::int64_t e = spec.num_experts, h = spec.hidden, i = spec.intermediate;
  LayerWeights w;
  w.router_weight = b.dense("router.weight", e, h, false);
  if (spec.router_bias)
    w.router_bias = b.dense("router.bias", 1, e, true);
  else
    b.reject_unexpected("router.bias", "this model family's router has no bias");
  if (spec.routing_params.selection_bias)
    w.selection_bias = b.dense("router.e_score_correction_bias", 1, e, true);
  if (spec.routing == RoutingMethod::hash) {
    const TensorRef& t = b.require("router.tid2eid");
    LayerReader::expect_dtype(t, {StDtype::I32, StDtype::I64});
    LayerReader::expect_shape(t, dims({spec.vocab, spec.top_k}));
    w.token_experts = {t.data().data(), t.info->dtype == StDtype::I64, spec.vocab, spec.top_k};
  }
  if (spec.shared_experts > 0 && spec.shared_weight_format != ElementType::mxfp4)
    throw LoadError("the gpt-oss layout holds MXFP4 shared experts only, not " +
                    std::string(to_string(spec.shared_weight_format)));
  w.w1 = mxfp4(b, "experts.gate_up_proj", e, 2 * i, h, true);
  w.w2 = mxfp4(b, "experts.down_proj", e, h, i, true);
  if (spec.expert_bias) {
    w.b1 = b.dense("experts.gate_up_proj_bias", e, 2 * i, false);
    w.b2 = b.dense("experts.down_proj_bias", e, h, false);
  } else {
    b.reject_unexpected("experts.gate_up_proj_bias", "this model family's experts have no bias");
    b.reject_unexpected("experts.down_proj_bias", "this model family's experts have no bias");
  }
  if (spec.shared_experts > 0) {
    const std::int64_t is = spec.shared_intermediate;
    w.shared_w1 = mxfp4(b, "shared_experts.gate_up_proj", 1, 2 * is, h, false);
    w.shared_w2 = mxfp4(b, "shared_experts.down_proj", 1, h, is, false);
  }
  return w;
}

std::string find_unquantized_expert_tensor(const TensorSet& set, int layer) {
  const std::string p = fmt::format("model.layers.{}.", layer);
  for (const std::string& name :
       {p + "mlp.experts.0.gate_proj.weight", p + "block_sparse_moe.experts.0.w1.weight",
        p + "mlp.experts.gate_up_proj", p + "ffn.experts.0.w1.weight"}) {
    if (const TensorRef* t = set.find(name))
      return fmt::format("{} ({} {})", name, to_string(t->info->dtype), shape_text(t->info->shape));
  }
  return "";
}

}  // namespace mxmoe::io
