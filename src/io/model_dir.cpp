#include "io/model_dir.hpp"

#include <fmt/core.h>

#include <filesystem>

#include "base/file.hpp"
#include "base/printable.hpp"
#include "io/checkpoint_file.hpp"
#include "io/deepseek_v4_layout.hpp"
#include "io/gpt_oss_layout.hpp"
#include "io/layer_reader.hpp"
#include "io/mapped_file.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe::io {

namespace {

// DeepSeek-V4 naming found at LAYER under PREFIX: the experts must be FP4 (MXFP4); the
// shared expert's storage decides the specs' shared_weight_format.
void use_deepseek_v4_layout(ModelDir& m, const std::string& prefix) {
  if (m.config.moe.family != Family::deepseek_v4)
    throw LoadError(
        fmt::format("{}: tensors \"{}experts.*\" are DeepSeek-V4 names but config.json "
                    "says model_type {}",
                    m.dir, prefix, m.config.model_type));
  const std::string first = prefix + "experts.0.w1.weight";
  const TensorRef& t = *m.tensors.find(first);
  const std::string found =
      fmt::format("{} ({} {})", first, to_string(t.info->dtype), shape_text(t.info->shape));
  switch (deepseek_v4_expert_storage(m.tensors, prefix)) {
    case V4ExpertStorage::dense:
      throw LoadError(fmt::format(
          "{}: the experts are not MXFP4 (found {}); mxmoe runs MXFP4 experts only: convert the "
          "checkpoint first with `mxmoe quantize --model {} --out OUT`",
          m.dir, found, m.dir));
    case V4ExpertStorage::fp8:
      throw LoadError(fmt::format(
          "{}: the routed experts are FP8 E4M3 (found {}, as in the -Base checkpoints); mxmoe "
          "runs MXFP4 experts (the FP4 release)",
          m.dir, found));
    case V4ExpertStorage::mxfp4:
      break;
  }
  m.layout = ModelDir::Layout::deepseek_v4;
  m.v4_root = prefix.substr(0, prefix.find("layers."));
  if (m.config.moe.shared_experts > 0) {
    const ElementType shared = deepseek_v4_shared_format(m.tensors, prefix);
    m.config.moe.shared_weight_format = shared;
    m.config.hash_moe.shared_weight_format = shared;
  }
}

}  // namespace

int layer_of(std::string_view name) {
  for (std::size_t at = name.find("layers."); at != std::string_view::npos;
       at = name.find("layers.", at + 1)) {
    if (at != 0 && name[at - 1] != '.') continue;
    std::size_t end = at + 7;
    int n = 0;
    while (end < name.size() && end < at + 14 && name[end] >= '0' && name[end] <= '9')
      n = n * 10 + (name[end++] - '0');
    if (end > at + 7 && end < name.size() && name[end] == '.') return n;
  }
  return -1;
}

void require_tensors_within_layers(const TensorSet& set, const ModelConfig& config,
                                   const std::string& dir) {
  const long long limit = static_cast<long long>(config.num_layers) + config.mtp_layers;
  const std::string* first = nullptr;
  int first_layer = 0;
  std::size_t beyond = 0;
  for (const auto& [name, ref] : set.tensors()) {
    (void)ref;
    // The decoder's own layers only: a vision tower's "visual.layers.N." is no decoder layer.
    const bool decoder = name.starts_with("model.layers.") || name.starts_with("layers.");
    const int n = decoder ? layer_of(name) : -1;
    if (n < limit) continue;
    if (first == nullptr) {
      first = &name;
      first_layer = n;
    }
    ++beyond;
  }
  if (first == nullptr) return;
  const std::string mtp =
      config.mtp_layers > 0
          ? fmt::format(" and {} MTP layer(s) (num_nextn_predict_layers)", config.mtp_layers)
          : "";
  throw LoadError(fmt::format(
      "{}: tensor \"{}\" is of layer {}, but config.json says num_hidden_layers {}{} ({} "
      "tensor(s) beyond); mxmoe does not leave layers unread: fix num_hidden_layers",
      files::printable(dir), printable(*first), first_layer, config.num_layers, mtp, beyond));
}

ModelDir ModelDir::open(const std::string& dir) {
  const std::string config_path = checkpoint_file(dir, "config.json");
  std::string name = std::filesystem::path(dir).lexically_normal().filename().string();
  if (name.empty()) name = std::filesystem::path(dir).lexically_normal().parent_path().filename();
  std::string text = read_text_file(config_path);
  ModelConfig config = parse_model_config(text, config_path, name);
  ModelDir m{dir, std::move(text), std::move(config), TensorSet::open_dir(dir), Layout::gpt_oss,
             ""};
  require_tensors_within_layers(m.tensors, m.config, dir);

  // The first MoE layer decides the naming and whether the experts are MXFP4 at all: a BF16
  // checkpoint gets the remedy, not a list of missing tensors.
  for (int layer = 0; layer < m.config.num_layers; ++layer) {
    if (!m.config.non_moe_reason[static_cast<std::size_t>(layer)].empty()) continue;
    const std::string blocks =
        fmt::format("model.layers.{}.mlp.experts.gate_up_proj_blocks", layer);
    if (m.tensors.find(blocks) != nullptr) break;
    if (const auto prefix = find_deepseek_v4_prefix(m.tensors, layer)) {
      use_deepseek_v4_layout(m, *prefix);
      break;
    }
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
  return config.spec_of(layer);
}

LayerWeights ModelDir::bind(int layer, bool check_values,
                            const std::vector<ExpertRange>* scale_experts) const {
  const LayerSpec& spec = moe_spec(layer);
  try {
    if (layout == Layout::deepseek_v4)
      return bind_deepseek_v4_layer(tensors, spec, fmt::format("{}layers.{}.ffn.", v4_root, layer),
                                    check_values, scale_experts);
    return bind_gpt_oss_layer(tensors, spec, layer, check_values, scale_experts);
  } catch (const LoadError& e) {
    throw LoadError(fmt::format("{}: layer {}: {}", dir, layer, e.what()));
  }
}

}  // namespace mxmoe::io
