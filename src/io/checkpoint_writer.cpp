#include "io/checkpoint_writer.hpp"

#include <fmt/core.h>

#include <filesystem>
#include <system_error>

#include "base/file.hpp"
#include "base/json.hpp"
#include "model/config_writer.hpp"
#include "model/model_config.hpp"
#include "mxmoe/checkpoint.hpp"

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

}  // namespace mxmoe::io

namespace mxmoe {

void generate_checkpoint(const std::string& out, const LayerSpec& spec,
                         const GenerateOptions& options) {
  using io::gpt_oss_layer_tensors;
  using io::LayerTensors;
  namespace fs = std::filesystem;
  if (options.layers < 1 || options.layers > 4096)
    throw std::invalid_argument("generate: layers must be 1..4096, got " +
                                std::to_string(options.layers));
  const std::string config = model_config_json(spec, options.layers);
  // The config must read back as the spec, or the checkpoint would not be what was asked.
  LayerSpec reread = parse_model_config(config, "generated config.json", spec.name).moe;
  if (reread != spec)
    throw std::invalid_argument(fmt::format(
        "generate: a {} config.json cannot express this layer exactly (it reads back as {})",
        to_string(spec.family), to_json(reread)));

  std::error_code ec;
  if (fs::symlink_status(out, ec).type() != fs::file_type::not_found && !options.force)
    throw LoadError(out + ": already exists (pass --force to replace it)");
  // Built whole beside OUT, then renamed into place (files::AtomicDirectory).
  files::AtomicDirectory staging(out);
  const std::string& temp = staging.path();
  files::write_file_atomically(temp + "/config.json", config);
  // One shard per layer (a layer at a time in memory), or one file for a single layer.
  json::Json weight_map = json::Json::object();
  std::uint64_t total = 0;
  for (int n = 0; n < options.layers; ++n) {
    const LayerStorage storage =
        LayerStorage::random(spec, options.seed + static_cast<std::uint64_t>(n));
    const LayerTensors tensors = gpt_oss_layer_tensors(spec, storage.weights(), n);
    const std::string file = options.layers == 1 ? "model.safetensors"
                                                 : fmt::format("model-{:05d}-of-{:05d}.safetensors",
                                                               n + 1, options.layers);
    write_safetensors(temp + "/" + file, tensors.tensors, {{"format", "pt"}});
    for (const TensorToWrite& t : tensors.tensors) {
      weight_map[t.name] = file;
      total += t.data.size();
    }
    if (options.progress)
      options.progress(fmt::format("generate: layer {}/{} -> {}", n + 1, options.layers, file));
  }
  if (options.layers > 1)
    files::write_file_atomically(
        temp + "/model.safetensors.index.json",
        json::Json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) +
            "\n");
  staging.commit(/*replace_existing=*/options.force);
}

}  // namespace mxmoe
