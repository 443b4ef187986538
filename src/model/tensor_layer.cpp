// layer_from_tensors: a layer's spec and views from tensors in the caller's memory. The
// tensors' dtypes and shapes are checked here (naming the tensor and the numbers); everything
// else is validate(spec, weights), the checks a checkpoint's layer goes through.
#include <fmt/core.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/validate_weights.hpp"
#include "mxmoe/layer_from_tensors.hpp"

namespace mxmoe {
namespace {

// Any dimension of a tensor handed over must lie in [1, kMaxDim] before sizes are derived
// from it (2I rows of W1 are the largest: 2 x kMaxLayerDim), so no product can overflow.
constexpr std::int64_t kMaxDim = 2 * std::int64_t{kMaxLayerDim};

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument(what);
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string_view dtype_name(TensorDtype d) {
  switch (d) {
    case TensorDtype::u8:
      return "uint8";
    case TensorDtype::f32:
      return "float32";
    case TensorDtype::bf16:
      return "bfloat16";
  }
  return "?";
}

// An MXFP4 tensor's blocks and scales, checked: present, uint8, every dimension in range.
void require_mxfp4_part(const HostTensor& t, const std::string& name, const char* layout) {
  if (t.empty()) fail(fmt::format("{} is missing (the {} layout needs it)", name, layout));
  if (t.dtype != TensorDtype::u8)
    fail(fmt::format(
        "{} has dtype {}, expected uint8 (MXFP4 blocks and E8M0 scales are bytes: pass an int8 "
        "or float8_e8m0fnu tensor as its uint8 view)",
        name, dtype_name(t.dtype)));
  for (std::size_t i = 0; i < t.shape.size(); ++i)
    if (t.shape[i] < 1 || t.shape[i] > kMaxDim)
      fail(fmt::format("{} has shape {}: dimension {} must lie in [1, {}]", name,
                       shape_text(t.shape), i, kMaxDim));
}

// Rows and columns of a stack of MXFP4 matrices from its blocks [lead..., rows, cols/2] or
// [lead..., rows, cols/32, 16]; LEAD dimensions come first (the experts of a fused tensor).
struct BlockShape {
  std::vector<std::int64_t> lead;
  std::int64_t rows = 0, cols = 0;
};

BlockShape block_shape(const HostTensor& blocks, const std::string& name, std::size_t lead,
                       const char* dims) {
  const std::size_t n = blocks.shape.size();
  const bool packed_bytes = n == lead + 2;
  if (!packed_bytes && !(n == lead + 3 && blocks.shape[n - 1] == 16))
    fail(fmt::format("{} has shape {}, expected {}", name, shape_text(blocks.shape), dims));
  BlockShape s;
  s.lead.assign(blocks.shape.begin(), blocks.shape.begin() + static_cast<std::ptrdiff_t>(lead));
  s.rows = blocks.shape[lead];
  s.cols = packed_bytes ? 2 * blocks.shape[lead + 1] : 32 * blocks.shape[lead + 1];
  return s;
}

// BLOCKS and SCALES of a stack [lead..., rows, cols] of MXFP4 matrices, exactly; `sizes` says
// where the numbers come from.
void expect_mxfp4(const HostTensor& blocks, const HostTensor& scales, const std::string& bname,
                  const std::string& sname, std::vector<std::int64_t> lead, std::int64_t rows,
                  std::int64_t cols, const std::string& sizes) {
  std::vector<std::int64_t> bytes = lead, split = lead, want_scales = lead;
  bytes.insert(bytes.end(), {rows, cols / 2});
  split.insert(split.end(), {rows, cols / 32, 16});
  want_scales.insert(want_scales.end(), {rows, cols / 32});
  if (blocks.shape != bytes && blocks.shape != split)
    fail(fmt::format("{} has shape {}, expected {} or {} ({})", bname, shape_text(blocks.shape),
                     shape_text(bytes), shape_text(split), sizes));
  if (scales.shape != want_scales)
    fail(fmt::format("{} has shape {}, expected {} ({})", sname, shape_text(scales.shape),
                     shape_text(want_scales), sizes));
}

// A bias or router tensor: float32 or bfloat16, aligned, of exactly SHAPE ([n] or [rows, n]).
DenseView dense(const HostTensor& t, const char* name, std::vector<std::int64_t> shape,
                const std::string& sizes) {
  if (t.dtype != TensorDtype::f32 && t.dtype != TensorDtype::bf16)
    fail(fmt::format("{} has dtype {}, expected float32 or bfloat16", name, dtype_name(t.dtype)));
  if (t.shape != shape)
    fail(fmt::format("{} has shape {}, expected {} ({})", name, shape_text(t.shape),
                     shape_text(shape), sizes));
  const std::size_t element = t.dtype == TensorDtype::f32 ? 4 : 2;
  if (reinterpret_cast<std::uintptr_t>(t.data) % element != 0)
    fail(fmt::format("{}: its data at {} is not aligned to its {}-byte {} elements", name, t.data,
                     element, dtype_name(t.dtype)));
  DenseView v;
  v.dtype = t.dtype == TensorDtype::f32 ? ElementType::f32 : ElementType::bf16;
  v.data = t.data;
  v.rows = shape.size() == 1 ? 1 : shape[0];
  v.cols = shape.back();
  return v;
}

// A size MATH gives must agree with the tensors' (0: read from the tensors).
void agree(const char* field, int given, std::int64_t found, const std::string& sizes) {
  if (given != 0 && given != found)
    fail(fmt::format("the spec's {} = {} disagrees with the tensors ({})", field, given, sizes));
}

}  // namespace

bool PerExpertTensors::empty() const noexcept {
  return w1_blocks.empty() && w1_scales.empty() && w3_blocks.empty() && w3_scales.empty() &&
         w2_blocks.empty() && w2_scales.empty();
}

LayerSpec family_math(Family family, const MathOverrides& o) {
  static constexpr std::pair<Family, const char*> kPresetOf[] = {
      {Family::gpt_oss, "gpt-oss-20b"},
      {Family::mixtral, "mixtral-8x7b"},
      {Family::qwen3_moe, "qwen3-30b-a3b"},
      {Family::deepseek_v3, "deepseek-v3"},
      {Family::deepseek_v4, "deepseek-v4-flash"}};
  LayerSpec s;
  for (const auto& [f, name] : kPresetOf)
    if (f == family) s = preset(name);
  s.name = std::string(to_string(family));
  s.num_experts = s.top_k = s.hidden = s.intermediate = 0;
  s.shared_experts = s.shared_intermediate = 0;
  s.shared_weight_format = ElementType::mxfp4;
  s.routing_params.n_group = s.routing_params.topk_group = 1;

  if (o.activation) s.activation = *o.activation;
  if (o.alpha) {
    if (s.activation != ActivationFn::swiglu_oai)
      fail(fmt::format("alpha applies to the swiglu_oai activation only, not {}",
                       to_string(s.activation)));
    s.activation_params.alpha = *o.alpha;
  }
  if (o.limit) {
    if (s.activation == ActivationFn::silu_glu)
      fail("limit applies to the swiglu_oai and silu_glu_clamp activations, not silu_glu");
    s.activation_params.limit = *o.limit;
  }
  if (o.routing) {
    s.routing = *o.routing;
    // topk_softmax ranks the raw logits: there is no score for a selection bias to shift.
    if (s.routing == RoutingMethod::topk_softmax) s.routing_params.selection_bias = false;
  }
  if (o.n_group || o.topk_group) {
    if (s.routing != RoutingMethod::sigmoid_group_topk)
      fail(fmt::format("n_group and topk_group apply to sigmoid_group_topk routing only, not {}",
                       to_string(s.routing)));
    s.routing_params.n_group = o.n_group.value_or(1);
    s.routing_params.topk_group = o.topk_group.value_or(1);
  }
  if (o.renormalize) s.routing_params.renormalize = *o.renormalize;
  if (o.routed_scaling_factor) s.routing_params.routed_scaling_factor = *o.routed_scaling_factor;
  if (o.gate_up) s.gate_up_layout = *o.gate_up;
  if (o.expert_bias) s.expert_bias = *o.expert_bias;
  return s;
}

TensorLayer layer_from_tensors(const LayerSpec& math, const LayerTensors& t) {
  TensorLayer out;
  LayerSpec& s = out.spec;
  LayerWeights& w = out.weights;
  s = math;
  if (s.routing == RoutingMethod::hash)
    fail(
        "hash routing (DeepSeek-V4's tid2eid layers) is not built from tensors: route them "
        "yourself and call forward_routed with the table's experts");
  if (s.shared_experts != 0 || s.shared_intermediate != 0)
    fail(
        "shared experts are not built from tensors (shared_experts must be 0): the engine runs "
        "the shared expert itself");

  const bool fused = !t.w13_blocks.empty() || !t.w13_scales.empty() || !t.w2_blocks.empty() ||
                     !t.w2_scales.empty();
  if (fused && !t.per_expert.empty())
    fail(
        "both the fused tensors (w13_blocks, ...) and per-expert tensors (w1_blocks[e], ...) "
        "are given: pass one layout");
  if (!fused && t.per_expert.empty())
    fail(
        "no expert weights: pass the fused tensors w13_blocks, w13_scales, w2_blocks and "
        "w2_scales, or the per-expert tensors w1_blocks, w1_scales, w3_blocks, w3_scales, "
        "w2_blocks and w2_scales (one per expert each)");

  std::int64_t e = 0, h = 0, i = 0;
  std::string sizes;
  const auto derive = [&](std::int64_t experts, std::int64_t hidden, std::int64_t inter,
                          const std::string& from) {
    e = experts;
    h = hidden;
    i = inter;
    sizes = fmt::format("E = {}, H = {}, I = {} from {}", e, h, i, from);
    agree("num_experts", math.num_experts, e, sizes);
    agree("hidden", math.hidden, h, sizes);
    agree("intermediate", math.intermediate, i, sizes);
    s.num_experts = static_cast<int>(e);
    s.hidden = static_cast<int>(h);
    s.intermediate = static_cast<int>(i);
    try {
      validate(s);  // the bounds and the MX block size, before any size is multiplied
    } catch (const std::invalid_argument& x) {
      fail(fmt::format("{} (with {})", x.what(), sizes));
    }
  };

  WeightNames names;
  if (fused) {
    constexpr const char* kLayout = "fused";
    require_mxfp4_part(t.w13_blocks, "w13_blocks", kLayout);
    require_mxfp4_part(t.w13_scales, "w13_scales", kLayout);
    require_mxfp4_part(t.w2_blocks, "w2_blocks", kLayout);
    require_mxfp4_part(t.w2_scales, "w2_scales", kLayout);
    const BlockShape w13 =
        block_shape(t.w13_blocks, "w13_blocks", 1, "[E, 2I, H/2] or [E, 2I, H/32, 16]");
    if (w13.rows % 2 != 0)
      fail(fmt::format("w13_blocks has shape {}: its {} rows are not 2I (gate and up rows)",
                       shape_text(t.w13_blocks.shape), w13.rows));
    derive(w13.lead[0], w13.cols, w13.rows / 2, "w13_blocks " + shape_text(t.w13_blocks.shape));
    expect_mxfp4(t.w13_blocks, t.w13_scales, "w13_blocks", "w13_scales", {e}, 2 * i, h, sizes);
    expect_mxfp4(t.w2_blocks, t.w2_scales, "w2_blocks", "w2_scales", {e}, h, i, sizes);
    const auto bytes = [](const HostTensor& x) { return static_cast<const std::uint8_t*>(x.data); };
    w.w1 = Mxfp4View::contiguous(bytes(t.w13_blocks), bytes(t.w13_scales), e, 2 * i, h);
    w.w2 = Mxfp4View::contiguous(bytes(t.w2_blocks), bytes(t.w2_scales), e, h, i);
    names.w1 = "w13_scales";
    names.w2 = "w2_scales";
  } else {
    const PerExpertTensors& p = t.per_expert;
    const std::pair<const std::vector<HostTensor>*, const char*> lists[] = {
        {&p.w1_blocks, "w1_blocks"}, {&p.w1_scales, "w1_scales"}, {&p.w3_blocks, "w3_blocks"},
        {&p.w3_scales, "w3_scales"}, {&p.w2_blocks, "w2_blocks"}, {&p.w2_scales, "w2_scales"}};
    for (const auto& [list, name] : lists) {
      if (list->size() != p.w1_blocks.size())
        fail(fmt::format(
            "per-expert tensors: {} holds {} tensors but w1_blocks holds {} (one per expert)", name,
            list->size(), p.w1_blocks.size()));
      if (list->size() > static_cast<std::size_t>(kMaxExperts))
        fail(fmt::format("per-expert tensors: {} experts, more than the bound {}", list->size(),
                         kMaxExperts));
    }
    constexpr const char* kLayout = "per-expert";
    for (const auto& [list, name] : lists)
      for (std::size_t x = 0; x < list->size(); ++x)
        require_mxfp4_part((*list)[x], fmt::format("{}[{}]", name, x), kLayout);
    const BlockShape gate =
        block_shape(p.w1_blocks[0], "w1_blocks[0]", 0, "[I, H/2] or [I, H/32, 16]");
    derive(static_cast<std::int64_t>(p.w1_blocks.size()), gate.cols, gate.rows,
           fmt::format("{} tensors in w1_blocks of shape {}", p.w1_blocks.size(),
                       shape_text(p.w1_blocks[0].shape)));
    std::vector<Mxfp4Segment> t1, t2;
    for (std::int64_t x = 0; x < e; ++x) {
      const auto at = static_cast<std::size_t>(x);
      const auto seg = [&](const std::vector<HostTensor>& b, const std::vector<HostTensor>& sc,
                           const char* stem, std::int64_t rows, std::int64_t cols) {
        expect_mxfp4(b[at], sc[at], fmt::format("{}_blocks[{}]", stem, x),
                     fmt::format("{}_scales[{}]", stem, x), {}, rows, cols, sizes);
        return Mxfp4Segment{static_cast<const std::uint8_t*>(b[at].data),
                            static_cast<const std::uint8_t*>(sc[at].data)};
      };
      t1.push_back(seg(p.w1_blocks, p.w1_scales, "w1", i, h));
      t1.push_back(seg(p.w3_blocks, p.w3_scales, "w3", i, h));
      t2.push_back(seg(p.w2_blocks, p.w2_scales, "w2", h, i));
    }
    w.w1 = Mxfp4View::segmented(std::move(t1), 2, e, 2 * i, h);
    w.w2 = Mxfp4View::segmented(std::move(t2), 1, e, h, i);
    s.gate_up_layout = GateUpLayout::halves;  // W1 is w1's rows, then w3's
    names.w1 = "w1_scales/w3_scales (W1 rows [0, I) from w1, [I, 2I) from w3)";
    names.w2 = "w2_scales";
  }

  if (!t.w13_bias.empty()) w.b1 = dense(t.w13_bias, "w13_bias", {e, 2 * i}, sizes);
  if (!t.w2_bias.empty()) w.b2 = dense(t.w2_bias, "w2_bias", {e, h}, sizes);
  names.b1 = "w13_bias";
  names.b2 = "w2_bias";
  if (t.router_weight.empty()) {
    for (const auto& [tensor, name] :
         {std::pair{&t.router_bias, "router_bias"}, std::pair{&t.selection_bias, "selection_bias"}})
      if (!tensor->empty())
        fail(
            fmt::format("{} is given without router_weight: a layer without a router (called with "
                        "forward_routed) takes no routing bias",
                        name));
    s.router_bias = false;
    s.routing_params.selection_bias = false;
  } else {
    w.router_weight = dense(t.router_weight, "router_weight", {e, h}, sizes);
    if (!t.router_bias.empty()) w.router_bias = dense(t.router_bias, "router_bias", {e}, sizes);
    if (!t.selection_bias.empty())
      w.selection_bias = dense(t.selection_bias, "selection_bias", {e}, sizes);
  }

  const ExpertRange all{0, s.num_experts};
  validate(s, w, std::span<const ExpertRange>(&all, 1), names);
  return out;
}

}  // namespace mxmoe
