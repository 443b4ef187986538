#include "io/gpt_oss_layout.hpp"

#include <fmt/core.h>

#include <cstring>

#include "mxmoe/checkpoint.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe::io {

namespace {

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<std::uint64_t> dims(std::initializer_list<std::int64_t> d) {
  std::vector<std::uint64_t> out;
  for (const std::int64_t v : d) out.push_back(static_cast<std::uint64_t>(v));
  return out;
}

class LayerBinder {
 public:
  LayerBinder(const TensorSet& set, int layer, bool check_values,
              const std::vector<ExpertRange>* scale_experts)
      : set_(set),
        prefix_(fmt::format("model.layers.{}.mlp.", layer)),
        check_(check_values),
        scale_experts_(scale_experts) {}

  const TensorRef& require(const std::string& suffix) const {
    const TensorRef* ref = set_.find(prefix_ + suffix);
    if (ref == nullptr) throw LoadError("missing tensor \"" + prefix_ + suffix + "\"");
    return *ref;
  }
  bool present(const std::string& suffix) const { return set_.find(prefix_ + suffix) != nullptr; }

  void expect_shape(const TensorRef& t, const std::vector<std::uint64_t>& shape) const {
    if (t.info->shape != shape)
      throw LoadError(fmt::format("{}: tensor \"{}\" has shape {}, expected {}", t.file->path(),
                                  t.info->name, shape_text(t.info->shape), shape_text(shape)));
  }

  // A BF16 or F32 tensor of shape [rows, cols] ([cols] when vector).
  DenseView dense(const std::string& suffix, std::int64_t rows, std::int64_t cols,
                  bool vector) const {
    const TensorRef& t = require(suffix);
    if (t.info->dtype != StDtype::BF16 && t.info->dtype != StDtype::F32)
      throw LoadError(fmt::format("{}: tensor \"{}\" has dtype {}, expected BF16 or F32",
                                  t.file->path(), t.info->name, to_string(t.info->dtype)));
    expect_shape(t, vector ? dims({cols}) : dims({rows, cols}));
    DenseView v;
    v.dtype = t.info->dtype == StDtype::BF16 ? DType::bf16 : DType::f32;
    v.data = t.data().data();
    v.rows = vector ? 1 : rows;
    v.cols = cols;
    if (check_) check_finite(t);
    return v;
  }

  // blocks [E, rows, cols/32, 16] U8 and scales [E, rows, cols/32] U8. `routed`: the
  // scales scanned are those of scale_experts_ when set.
  Mxfp4View mxfp4(const std::string& stem, std::int64_t experts, std::int64_t rows,
                  std::int64_t cols, bool routed = true) const {
    const TensorRef& blocks = require(stem + "_blocks");
    const TensorRef& scales = require(stem + "_scales");
    for (const TensorRef* t : {&blocks, &scales})
      if (t->info->dtype != StDtype::U8)
        throw LoadError(fmt::format("{}: tensor \"{}\" has dtype {}, expected U8", t->file->path(),
                                    t->info->name, to_string(t->info->dtype)));
    const std::int64_t nb = cols / 32;
    expect_shape(blocks, dims({experts, rows, nb, 16}));
    expect_shape(scales, dims({experts, rows, nb}));
    if (check_ && routed && scale_experts_ != nullptr) {
      for (const ExpertRange& r : *scale_experts_) {
        if (r.begin < 0 || r.end < r.begin || r.end > experts)
          throw LoadError(fmt::format("experts [{}, {}) to check lie outside the {} experts of {}",
                                      r.begin, r.end, experts, scales.info->name));
        check_scales(scales, rows, nb, static_cast<std::size_t>(r.begin * rows * nb),
                     static_cast<std::size_t>(r.end * rows * nb));
      }
    } else if (check_) {
      check_scales(scales, rows, nb, 0, scales.data().size());
    }
    Mxfp4View v;
    v.blocks = blocks.data().data();
    v.scales = scales.data().data();
    v.experts = experts;
    v.rows = rows;
    v.cols = cols;
    return v;
  }

  void reject_unexpected(const std::string& suffix, const std::string& why) const {
    if (present(suffix)) throw LoadError("unexpected tensor \"" + prefix_ + suffix + "\": " + why);
  }

 private:
  // Bytes [begin, end) of a scale tensor.
  static void check_scales(const TensorRef& t, std::int64_t rows, std::int64_t blocks_per_row,
                           std::size_t begin, std::size_t end) {
    const auto bytes = t.data();
    for (std::size_t i = begin; i < end && i < bytes.size(); ++i) {
      if (bytes[i] != kE8m0Nan) continue;
      const auto flat = static_cast<std::int64_t>(i);
      throw LoadError(fmt::format(
          "{}: tensor \"{}\" holds the E8M0 NaN scale 0xFF at index {} (expert {}, row {}, "
          "block {})",
          t.file->path(), t.info->name, flat, flat / (rows * blocks_per_row),
          flat / blocks_per_row % rows, flat % blocks_per_row));
    }
  }

  static void check_finite(const TensorRef& t) {
    const auto bytes = t.data();
    const bool bf16 = t.info->dtype == StDtype::BF16;
    const std::size_t width = bf16 ? 2 : 4;
    for (std::size_t i = 0; i + width <= bytes.size(); i += width) {
      bool bad = false;
      if (bf16) {
        std::uint16_t v;
        std::memcpy(&v, bytes.data() + i, 2);
        bad = (v & 0x7F80u) == 0x7F80u;
      } else {
        std::uint32_t v;
        std::memcpy(&v, bytes.data() + i, 4);
        bad = (v & 0x7F800000u) == 0x7F800000u;
      }
      if (bad)
        throw LoadError(fmt::format("{}: tensor \"{}\" holds NaN or Inf at index {}",
                                    t.file->path(), t.info->name, i / width));
    }
  }

  const TensorSet& set_;
  std::string prefix_;
  bool check_;
  const std::vector<ExpertRange>* scale_experts_;
};

}  // namespace

LayerWeights bind_gpt_oss_layer(const TensorSet& set, const LayerSpec& spec, int layer,
                                bool check_values, const std::vector<ExpertRange>* scale_experts) {
  const LayerBinder b(set, layer, check_values, scale_experts);
  const std::int64_t e = spec.num_experts, h = spec.hidden, i = spec.intermediate;
  LayerWeights w;
  w.router_weight = b.dense("router.weight", e, h, false);
  if (spec.router_bias)
    w.router_bias = b.dense("router.bias", 1, e, true);
  else
    b.reject_unexpected("router.bias", "this model family's router has no bias");
  if (spec.routing_params.selection_bias)
    w.selection_bias = b.dense("router.e_score_correction_bias", 1, e, true);
  w.w1 = b.mxfp4("experts.gate_up_proj", e, 2 * i, h);
  w.w2 = b.mxfp4("experts.down_proj", e, h, i);
  if (spec.expert_bias) {
    w.b1 = b.dense("experts.gate_up_proj_bias", e, 2 * i, false);
    w.b2 = b.dense("experts.down_proj_bias", e, h, false);
  } else {
    b.reject_unexpected("experts.gate_up_proj_bias", "this model family's experts have no bias");
    b.reject_unexpected("experts.down_proj_bias", "this model family's experts have no bias");
  }
  if (spec.shared_experts > 0) {
    const std::int64_t is = spec.shared_intermediate;
    w.shared_w1 = b.mxfp4("shared_experts.gate_up_proj", 1, 2 * is, h, false);
    w.shared_w2 = b.mxfp4("shared_experts.down_proj", 1, h, is, false);
  }
  return w;
}

std::string find_unquantized_expert_tensor(const TensorSet& set, int layer) {
  const std::string p = fmt::format("model.layers.{}.", layer);
  for (const std::string& name :
       {p + "mlp.experts.0.gate_proj.weight", p + "block_sparse_moe.experts.0.w1.weight",
        p + "mlp.experts.gate_up_proj"}) {
    if (const TensorRef* t = set.find(name))
      return fmt::format("{} ({} {})", name, to_string(t->info->dtype), shape_text(t->info->shape));
  }
  return "";
}

}  // namespace mxmoe::io
