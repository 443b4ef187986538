#include "io/model_dir.hpp"

#include <fmt/core.h>

#include <filesystem>

#include "io/checkpoint_file.hpp"
#include "io/gpt_oss_layout.hpp"
#include "io/mapped_file.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe::io {

ModelDir ModelDir::open(const std::string& dir) {
  const std::string config_path = checkpoint_file(dir, "config.json");
  std::string name = std::filesystem::path(dir).lexically_normal().filename().string();
  if (name.empty()) name = std::filesystem::path(dir).lexically_normal().parent_path().filename();
  std::string text = read_text_file(config_path);
  ModelConfig config = parse_model_config(text, config_path, name);
  ModelDir m{dir, std::move(text), std::move(config), TensorSet::open_dir(dir)};

  // The first MoE layer decides whether the experts are MXFP4 at all: a BF16 checkpoint
  // gets the remedy, not a list of missing tensors.
  for (int layer = 0; layer < m.config.num_layers; ++layer) {
    if (!m.config.non_moe_reason[static_cast<std::size_t>(layer)].empty()) continue;
    const std::string blocks =
        fmt::format("model.layers.{}.mlp.experts.gate_up_proj_blocks", layer);
    if (m.tensors.find(blocks) != nullptr) break;
    const std::string dense = find_unquantized_expert_tensor(m.tensors, layer);
    if (!dense.empty())
      throw LoadError(fmt::format(
          "{}: the experts are not MXFP4 (found {}); mxmoe runs MXFP4 experts only: convert the "
          "checkpoint first with `mxmoe quantize --model {} --out OUT`",
          dir, dense, dir));
    throw LoadError(
        fmt::format("{}: missing tensor \"{}\" (layer {} is a MoE layer per "
                    "config.json; no dense fallback)",
                    dir, blocks, layer));
  }
  return m;
}

const LayerSpec& ModelDir::moe_spec(int layer) const {
  if (layer < 0 || layer >= config.num_layers)
    throw LoadError(fmt::format("{}: layer {} is out of range (the model has {} layers)", dir,
                                layer, config.num_layers));
  const std::string& why = config.non_moe_reason[static_cast<std::size_t>(layer)];
  if (!why.empty())
    throw LoadError(
        fmt::format("{}: layer {} is not a MoE layer mxmoe can run: {}", dir, layer, why));
  return config.moe;
}

LayerWeights ModelDir::bind(int layer, bool check_values,
                            const std::vector<ExpertRange>* scale_experts) const {
  const LayerSpec& spec = moe_spec(layer);
  try {
    return bind_gpt_oss_layer(tensors, spec, layer, check_values, scale_experts);
  } catch (const LoadError& e) {
    throw LoadError(fmt::format("{}: layer {}: {}", dir, layer, e.what()));
  }
}

}  // namespace mxmoe::io
