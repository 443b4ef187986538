#include "io/checkpoint_writer.hpp"

#include <fmt/core.h>

#include <cstring>
#include <filesystem>
#include <system_error>

#include "base/file.hpp"
#include "base/json.hpp"
#include "model/config_writer.hpp"
#include "model/model_config.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe::io {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint64_t> u64s(std::initializer_list<std::int64_t> d) {
  std::vector<std::uint64_t> out;
  for (const auto v : d) out.push_back(static_cast<std::uint64_t>(v));
  return out;
}

class Builder {
 public:
  Builder(LayerTensors& out, std::string prefix) : out_(out), prefix_(std::move(prefix)) {}

  void dense(const std::string& suffix, const DenseView& v, std::vector<std::uint64_t> shape) {
    const std::size_t element = v.dtype == DType::f32 ? 4 : 2;
    const auto* p = static_cast<const std::uint8_t*>(v.data);
    add(suffix, v.dtype == DType::f32 ? StDtype::F32 : StDtype::BF16, std::move(shape),
        std::vector<std::uint8_t>(p, p + static_cast<std::size_t>(v.rows * v.cols) * element));
  }

  // [E, rows, cols/32, 16] blocks and [E, rows, cols/32] scales, read row by row through the
  // view's accessors (whatever its storage).
  void mxfp4(const std::string& stem, const Mxfp4View& v) {
    std::vector<std::uint8_t> blocks, scales;
    blocks.reserve(static_cast<std::size_t>(v.experts * v.rows * v.row_bytes()));
    scales.reserve(static_cast<std::size_t>(v.experts * v.rows * v.row_scales()));
    for (std::int64_t e = 0; e < v.experts; ++e)
      for (std::int64_t r = 0; r < v.rows; ++r) {
        blocks.insert(blocks.end(), v.row_blocks(e, r), v.row_blocks(e, r) + v.row_bytes());
        scales.insert(scales.end(), v.row_scale(e, r), v.row_scale(e, r) + v.row_scales());
      }
    add(stem + "_blocks", StDtype::U8, u64s({v.experts, v.rows, v.cols / 32, 16}),
        std::move(blocks));
    add(stem + "_scales", StDtype::U8, u64s({v.experts, v.rows, v.cols / 32}), std::move(scales));
  }

 private:
  void add(const std::string& suffix, StDtype dtype, std::vector<std::uint64_t> shape,
           std::vector<std::uint8_t> bytes) {
    out_.bytes.push_back(std::move(bytes));
    out_.tensors.push_back({prefix_ + suffix, dtype, std::move(shape), out_.bytes.back()});
  }
  LayerTensors& out_;
  std::string prefix_;
};

// One [rows, cols] matrix of an MXFP4 view (rows [first, first + rows) of expert e) as
// DeepSeek stores it: I8 [rows, cols/2] E2M1 pairs and F8_E8M0 [rows, cols/32].
void v4_fp4(LayerTensors& out, const std::string& name, const Mxfp4View& v, std::int64_t e,
            std::int64_t first, std::int64_t rows) {
  std::vector<std::uint8_t> blocks, scales;
  for (std::int64_t r = first; r < first + rows; ++r) {
    blocks.insert(blocks.end(), v.row_blocks(e, r), v.row_blocks(e, r) + v.row_bytes());
    scales.insert(scales.end(), v.row_scale(e, r), v.row_scale(e, r) + v.row_scales());
  }
  out.bytes.push_back(std::move(blocks));
  out.tensors.push_back(
      {name + ".weight", StDtype::I8, u64s({rows, v.cols / 2}), out.bytes.back()});
  out.bytes.push_back(std::move(scales));
  out.tensors.push_back(
      {name + ".scale", StDtype::F8_E8M0, u64s({rows, v.cols / 32}), out.bytes.back()});
}

// Segment p of a dense (FP8) matrix as stored: E4M3 [rows, cols] and its block scales.
void v4_fp8(LayerTensors& out, const std::string& name, const DenseMatrixView& v, int part) {
  if (v.element != DenseElement::e4m3 || !v.scale_e8m0)
    throw std::invalid_argument(
        "deepseek_v4_layer_tensors: the shared expert must be FP8 E4M3 "
        "with E8M0 scales, or MXFP4");
  const std::int64_t rows = v.segment_rows();
  const auto* codes = static_cast<const std::uint8_t*>(v.segment[part].data);
  const auto* scales = static_cast<const std::uint8_t*>(v.segment[part].scales);
  out.bytes.emplace_back(codes, codes + rows * v.cols);
  out.tensors.push_back(
      {name + ".weight", StDtype::F8_E4M3, u64s({rows, v.cols}), out.bytes.back()});
  out.bytes.emplace_back(scales, scales + v.scale_rows() * v.scale_cols());
  out.tensors.push_back({name + ".scale", StDtype::F8_E8M0, u64s({v.scale_rows(), v.scale_cols()}),
                         out.bytes.back()});
}

}  // namespace

LayerTensors gpt_oss_layer_tensors(const LayerSpec& spec, const LayerWeights& w, int layer) {
  validate(spec, w);
  LayerTensors out;
  out.bytes.reserve(16);  // TensorToWrite views must not move: no reallocation below
  Builder b(out, fmt::format("model.layers.{}.mlp.", layer));
  const std::int64_t e = spec.num_experts, h = spec.hidden, i = spec.intermediate;
  if (w.router_weight.empty())
    throw std::invalid_argument("gpt_oss_layer_tensors: the layer has no router weights");
  b.dense("router.weight", w.router_weight, u64s({e, h}));
  if (spec.router_bias) b.dense("router.bias", w.router_bias, u64s({e}));
  if (spec.routing_params.selection_bias)
    b.dense("router.e_score_correction_bias", w.selection_bias, u64s({e}));
  b.mxfp4("experts.gate_up_proj", w.w1);
  b.mxfp4("experts.down_proj", w.w2);
  if (spec.expert_bias) {
    b.dense("experts.gate_up_proj_bias", w.b1, u64s({e, 2 * i}));
    b.dense("experts.down_proj_bias", w.b2, u64s({e, h}));
  }
  if (spec.shared_experts > 0) {
    b.mxfp4("shared_experts.gate_up_proj", w.shared_w1);
    b.mxfp4("shared_experts.down_proj", w.shared_w2);
  }
  return out;
}

LayerTensors deepseek_v4_layer_tensors(const LayerSpec& spec, const LayerWeights& w, int layer) {
  validate(spec, w);
  if (spec.family != Family::deepseek_v4 || spec.gate_up_layout != GateUpLayout::halves)
    throw std::invalid_argument("deepseek_v4_layer_tensors: not a DeepSeek-V4 layer");
  if (w.router_weight.empty())
    throw std::invalid_argument("deepseek_v4_layer_tensors: the layer has no router weights");
  LayerTensors out;
  const std::int64_t e = spec.num_experts, h = spec.hidden, i = spec.intermediate;
  out.bytes.reserve(static_cast<std::size_t>(6 * e + 16));  // views must not move
  const std::string p = fmt::format("layers.{}.ffn.", layer);
  std::vector<std::uint8_t> router(static_cast<std::size_t>(e * h * 2));
  for (std::int64_t k = 0; k < e * h; ++k) {
    const std::uint16_t bits = f32_to_bf16(w.router_weight.at(k));
    std::memcpy(router.data() + 2 * k, &bits, 2);
  }
  out.bytes.push_back(std::move(router));
  out.tensors.push_back({p + "gate.weight", StDtype::BF16, u64s({e, h}), out.bytes.back()});
  if (spec.routing == RoutingMethod::hash) {
    std::vector<std::uint8_t> ids(static_cast<std::size_t>(spec.vocab * spec.top_k * 8));
    for (std::int64_t t = 0; t < spec.vocab; ++t)
      for (std::int64_t j = 0; j < spec.top_k; ++j) {
        const std::int64_t id = w.token_experts.at(t, j);
        std::memcpy(ids.data() + 8 * (t * spec.top_k + j), &id, 8);
      }
    out.bytes.push_back(std::move(ids));
    out.tensors.push_back(
        {p + "gate.tid2eid", StDtype::I64, u64s({spec.vocab, spec.top_k}), out.bytes.back()});
  } else {
    std::vector<std::uint8_t> bias(static_cast<std::size_t>(e * 4));
    for (std::int64_t k = 0; k < e; ++k) {
      const float v = w.selection_bias.at(k);
      std::memcpy(bias.data() + 4 * k, &v, 4);
    }
    out.bytes.push_back(std::move(bias));
    out.tensors.push_back({p + "gate.bias", StDtype::F32, u64s({e}), out.bytes.back()});
  }
  for (std::int64_t x = 0; x < e; ++x) {
    const std::string at = fmt::format("{}experts.{}.", p, x);
    v4_fp4(out, at + "w1", w.w1, x, 0, i);
    v4_fp4(out, at + "w3", w.w1, x, i, i);
    v4_fp4(out, at + "w2", w.w2, x, 0, h);
  }
  if (spec.shared_experts > 0) {
    const std::int64_t is = spec.shared_intermediate;
    if (spec.shared_weight_format == WeightFormat::mxfp4) {
      v4_fp4(out, p + "shared_experts.w1", w.shared_w1, 0, 0, is);
      v4_fp4(out, p + "shared_experts.w3", w.shared_w1, 0, is, is);
      v4_fp4(out, p + "shared_experts.w2", w.shared_w2, 0, 0, h);
    } else {
      if (w.shared_dense_w1.parts != 2)
        throw std::invalid_argument("deepseek_v4_layer_tensors: shared w1 must be two segments");
      v4_fp8(out, p + "shared_experts.w1", w.shared_dense_w1, 0);
      v4_fp8(out, p + "shared_experts.w3", w.shared_dense_w1, 1);
      v4_fp8(out, p + "shared_experts.w2", w.shared_dense_w2, 0);
    }
  }
  return out;
}

CheckpointDirectoryWriter::CheckpointDirectoryWriter(const std::string& out, bool force)
    : force_(force),
      out_exists_([&] {
        std::error_code ec;
        const fs::file_status st = fs::symlink_status(out, ec);
        if (st.type() == fs::file_type::not_found) return false;
        if (!force) throw LoadError(out + ": already exists (pass --force to replace it whole)");
        if (!fs::is_directory(fs::status(out, ec)))
          throw LoadError(out +
                          ": exists and is not a directory (--force replaces a directory "
                          "only)");
        return true;
      }()),
      staging_(out) {}

void CheckpointDirectoryWriter::add_shard(const std::string& file,
                                          const std::vector<TensorToWrite>& tensors) {
  write_safetensors(staging_.path() + "/" + file, tensors, {{"format", "pt"}});
  for (const TensorToWrite& t : tensors) {
    weight_map_[t.name] = file;
    total_ += t.data.size();
  }
}

void CheckpointDirectoryWriter::finish(const std::string& config_json, bool with_index) {
  if (with_index)
    files::write_file_atomically(
        staging_.path() + "/model.safetensors.index.json",
        json::Json{{"metadata", {{"total_size", total_}}}, {"weight_map", weight_map_}}.dump(2) +
            "\n");
  files::write_file_atomically(staging_.path() + "/config.json", config_json);
  staging_.commit(/*replace_existing=*/force_);
}

}  // namespace mxmoe::io

namespace mxmoe {

void generate_checkpoint(const std::string& out, const LayerSpec& spec,
                         const GenerateOptions& options) {
  using io::deepseek_v4_layer_tensors;
  using io::gpt_oss_layer_tensors;
  using io::LayerTensors;
  if (options.layers < 1 || options.layers > 4096)
    throw std::invalid_argument("generate: layers must be 1..4096, got " +
                                std::to_string(options.layers));
  const bool v4 = spec.family == Family::deepseek_v4;
  if (!v4 && options.hash_layers != 0)
    throw std::invalid_argument("generate: hash layers are DeepSeek-V4's (use its preset)");
  if (options.hash_layers < 0 || options.hash_layers > options.layers)
    throw std::invalid_argument(
        fmt::format("generate: {} hash layers of {} layers", options.hash_layers, options.layers));
  if (options.vocab < 0 || options.vocab > kMaxVocab)
    throw std::invalid_argument(fmt::format(
        "generate: vocab must be 0 (the default) or 1..{}, got {}", kMaxVocab, options.vocab));
  // DeepSeek-V4's hash layers: the routed spec's math with experts by token id.
  LayerSpec hash_spec = spec;
  if (spec.routing != RoutingMethod::hash && options.hash_layers > 0) {
    hash_spec.routing = RoutingMethod::hash;
    hash_spec.routing_params.selection_bias = false;
    hash_spec.routing_params.n_group = hash_spec.routing_params.topk_group = 1;
    hash_spec.routing_params.score_function =
        spec.routing == RoutingMethod::sigmoid_group_topk ? ScoreFunction::sigmoid
        : spec.routing == RoutingMethod::softmax_topk     ? ScoreFunction::softmax
                                                          : ScoreFunction::sqrtsoftplus;
    hash_spec.vocab = options.vocab > 0 ? options.vocab : 129280;
  }
  const auto spec_of = [&](int n) -> const LayerSpec& {
    return n < options.hash_layers ? hash_spec : spec;
  };
  const std::string config =
      model_config_json(spec, options.layers, HashLayers{options.hash_layers, hash_spec.vocab});
  // The config must read back as the spec, or the checkpoint would not be what was asked.
  const ModelConfig reread = parse_model_config(config, "generated config.json", spec.name);
  for (int n = 0; n < options.layers; ++n)
    if (reread.spec_of(n) != spec_of(n))
      throw std::invalid_argument(fmt::format(
          "generate: a {} config.json cannot express layer {} exactly (it reads back as {})",
          to_string(spec.family), n, to_json(reread.spec_of(n))));

  // One shard per layer (a layer at a time in memory), or one file for a single layer.
  io::CheckpointDirectoryWriter writer(out, options.force);
  for (int n = 0; n < options.layers; ++n) {
    const LayerStorage storage =
        LayerStorage::random(spec_of(n), options.seed + static_cast<std::uint64_t>(n));
    const LayerTensors tensors = v4 ? deepseek_v4_layer_tensors(spec_of(n), storage.weights(), n)
                                    : gpt_oss_layer_tensors(spec, storage.weights(), n);
    const std::string file = options.layers == 1 ? "model.safetensors"
                                                 : fmt::format("model-{:05d}-of-{:05d}.safetensors",
                                                               n + 1, options.layers);
    writer.add_shard(file, tensors.tensors);
    if (options.progress)
      options.progress(fmt::format("generate: layer {}/{} -> {}", n + 1, options.layers, file));
  }
  writer.finish(config, /*with_index=*/options.layers > 1);
}

}  // namespace mxmoe
