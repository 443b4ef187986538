#include "io/quantize_checkpoint.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/file.hpp"
#include "base/json.hpp"
#include "io/checkpoint_file.hpp"
#include "io/mapped_file.hpp"
#include "io/tensor_set.hpp"
#include "model/model_config.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/safetensors.hpp"

namespace mxmoe::io {

namespace {

namespace fs = std::filesystem;

// Tensor names of one layer in the source checkpoint.
struct SourceNames {
  std::string router, selection_bias;
  std::string gate, up, down;  // with {} for the expert index
  std::string shared_gate, shared_up, shared_down;
};

SourceNames source_names(const TensorSet& set, int layer) {
  const std::string mlp = fmt::format("model.layers.{}.mlp.", layer);
  const std::string moe = fmt::format("model.layers.{}.block_sparse_moe.", layer);
  if (set.find(moe + "experts.0.w1.weight"))  // Mixtral's original names
    return {moe + "gate.weight",
            "",
            moe + "experts.{}.w1.weight",
            moe + "experts.{}.w3.weight",
            moe + "experts.{}.w2.weight",
            "",
            "",
            ""};
  return {mlp + "gate.weight",
          mlp + "gate.e_score_correction_bias",
          mlp + "experts.{}.gate_proj.weight",
          mlp + "experts.{}.up_proj.weight",
          mlp + "experts.{}.down_proj.weight",
          mlp + "shared_experts.gate_proj.weight",
          mlp + "shared_experts.up_proj.weight",
          mlp + "shared_experts.down_proj.weight"};
}

const TensorRef& require(const TensorSet& set, const std::string& name, const std::string& dir) {
  const TensorRef* t = set.find(name);
  if (t == nullptr) throw LoadError(dir + ": missing tensor \"" + name + "\"");
  return *t;
}

// Row-wise MXFP4 quantizer of BF16/F32 [rows, cols] matrices into a growing output.
class ProjectionWriter {
 public:
  ProjectionWriter(std::int64_t matrices, std::int64_t rows, std::int64_t cols, ScaleRule rule)
      : rows_(rows),
        cols_(cols),
        rule_(rule),
        blocks_(static_cast<std::size_t>(matrices * rows * cols / 2)),
        scales_(static_cast<std::size_t>(matrices * rows * cols / 32)),
        row_(static_cast<std::size_t>(cols)) {}

  // Quantizes rows [0, rows) of T into output rows [first_row, first_row + rows) of matrix M.
  void add(const TensorRef& t, std::int64_t m, std::int64_t first_row, std::int64_t rows) {
    const auto& info = *t.info;
    const std::vector<std::uint64_t> want = {static_cast<std::uint64_t>(rows),
                                             static_cast<std::uint64_t>(cols_)};
    if (info.dtype != StDtype::BF16 && info.dtype != StDtype::F32)
      throw LoadError(fmt::format("{}: tensor \"{}\" has dtype {}, expected BF16 or F32",
                                  t.file->path(), info.name, to_string(info.dtype)));
    if (info.shape != want)
      throw LoadError(fmt::format("{}: tensor \"{}\" has shape [{}], expected [{}, {}]",
                                  t.file->path(), info.name, fmt::join(info.shape, ", "), rows,
                                  cols_));
    const auto bytes = t.data();
    const bool bf16 = info.dtype == StDtype::BF16;
    const auto cols = static_cast<std::size_t>(cols_);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < cols; ++c) {
        const std::size_t i = static_cast<std::size_t>(r) * cols + c;
        if (bf16) {
          std::uint16_t v;
          std::memcpy(&v, bytes.data() + 2 * i, 2);
          row_[c] = bf16_to_f32(v);
        } else {
          std::memcpy(&row_[c], bytes.data() + 4 * i, 4);
        }
        if (!std::isfinite(row_[c]))
          throw LoadError(fmt::format("{}: tensor \"{}\" holds NaN or Inf at index {}",
                                      t.file->path(), info.name, i));
      }
      const auto out_row = static_cast<std::size_t>(m * rows_ + first_row + r);
      quantize_mxfp4(row_, rule_, std::span(blocks_).subspan(out_row * cols / 2, cols / 2),
                     std::span(scales_).subspan(out_row * cols / 32, cols / 32));
    }
  }
  const std::vector<std::uint8_t>& blocks() const { return blocks_; }
  const std::vector<std::uint8_t>& scales() const { return scales_; }

 private:
  std::int64_t rows_, cols_;
  ScaleRule rule_;
  std::vector<std::uint8_t> blocks_, scales_;
  std::vector<float> row_;
};

std::vector<std::uint64_t> u64s(std::initializer_list<std::int64_t> d) {
  std::vector<std::uint64_t> out;
  for (const auto v : d) out.push_back(static_cast<std::uint64_t>(v));
  return out;
}

}  // namespace

void quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                         const QuantizeOptions& options) {
  const std::string config_path = checkpoint_file(in_dir, "config.json");
  const std::string config_text = read_text_file(config_path);
  const ModelConfig config = parse_model_config(config_text, config_path, "");
  if (config.quant_method == "mxfp4")
    throw LoadError(in_dir + ": the checkpoint is already MXFP4 (quantization_config)");
  if (config.moe.family == Family::gpt_oss)
    throw LoadError(in_dir +
                    ": unquantized gpt-oss checkpoints are not supported by `mxmoe "
                    "quantize` (use the MXFP4 release)");
  const TensorSet set = TensorSet::open_dir(in_dir);

  std::error_code ec;
  const bool out_exists = fs::symlink_status(out_dir, ec).type() != fs::file_type::not_found;
  if (out_exists && !options.force)
    throw LoadError(out_dir + ": already exists (pass --force to replace it whole)");
  if (out_exists && !fs::is_directory(fs::symlink_status(out_dir, ec)))
    throw LoadError(out_dir +
                    ": exists and is not a directory (--force replaces a directory only)");
  if (out_exists && fs::equivalent(out_dir, in_dir, ec))
    throw LoadError(out_dir + ": the output directory is the input directory");
  {
    // Replacing a directory that holds the input would delete the input.
    const std::string in_real = fs::weakly_canonical(in_dir, ec).string() + "/";
    const std::string out_real = fs::weakly_canonical(out_dir, ec).string() + "/";
    if (in_real.rfind(out_real, 0) == 0)
      throw LoadError(out_dir + ": the output directory contains the input directory " + in_dir);
  }
  const auto check_cancelled = [&] {
    if (options.cancelled && options.cancelled())
      throw QuantizeCancelled("quantize: interrupted; " + out_dir +
                              (out_exists ? " is left as it was" : " was not created"));
  };
  files::AtomicDirectory staging(out_dir);
  const std::string& tmp = staging.path();

  const LayerSpec& s = config.moe;
  const std::int64_t e = s.num_experts, h = s.hidden, i = s.intermediate;
  int moe_layers = 0;
  for (const auto& why : config.non_moe_reason) moe_layers += why.empty() ? 1 : 0;

  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  std::uint64_t total = 0;
  int shard = 0;
  for (int layer = 0; layer < config.num_layers; ++layer) {
    if (!config.non_moe_reason[static_cast<std::size_t>(layer)].empty()) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const SourceNames src = source_names(set, layer);
    ProjectionWriter w1(e, 2 * i, h, options.scale_rule), w2(e, h, i, options.scale_rule);
    for (std::int64_t x = 0; x < e; ++x) {
      check_cancelled();
      w1.add(require(set, fmt::format(fmt::runtime(src.gate), x), in_dir), x, 0, i);
      w1.add(require(set, fmt::format(fmt::runtime(src.up), x), in_dir), x, i, i);
      w2.add(require(set, fmt::format(fmt::runtime(src.down), x), in_dir), x, 0, h);
    }
    const std::string p = fmt::format("model.layers.{}.mlp.", layer);
    const TensorRef& router = require(set, src.router, in_dir);
    if (router.info->shape != u64s({e, h}) ||
        (router.info->dtype != StDtype::BF16 && router.info->dtype != StDtype::F32))
      throw LoadError(
          fmt::format("{}: tensor \"{}\" must be BF16/F32 [{}, {}]", in_dir, src.router, e, h));
    std::vector<TensorToWrite> out = {
        {p + "router.weight", router.info->dtype, router.info->shape, router.data()},
        {p + "experts.gate_up_proj_blocks", StDtype::U8, u64s({e, 2 * i, h / 32, 16}), w1.blocks()},
        {p + "experts.gate_up_proj_scales", StDtype::U8, u64s({e, 2 * i, h / 32}), w1.scales()},
        {p + "experts.down_proj_blocks", StDtype::U8, u64s({e, h, i / 32, 16}), w2.blocks()},
        {p + "experts.down_proj_scales", StDtype::U8, u64s({e, h, i / 32}), w2.scales()},
    };
    if (s.routing_params.selection_bias) {
      const TensorRef& bias = require(set, src.selection_bias, in_dir);
      out.push_back(
          {p + "router.e_score_correction_bias", bias.info->dtype, bias.info->shape, bias.data()});
    }
    std::optional<ProjectionWriter> sw1, sw2;
    if (s.shared_experts > 0) {
      const std::int64_t is = s.shared_intermediate;
      sw1.emplace(1, 2 * is, h, options.scale_rule);
      sw2.emplace(1, h, is, options.scale_rule);
      sw1->add(require(set, src.shared_gate, in_dir), 0, 0, is);
      sw1->add(require(set, src.shared_up, in_dir), 0, is, is);
      sw2->add(require(set, src.shared_down, in_dir), 0, 0, h);
      out.push_back({p + "shared_experts.gate_up_proj_blocks", StDtype::U8,
                     u64s({1, 2 * is, h / 32, 16}), sw1->blocks()});
      out.push_back({p + "shared_experts.gate_up_proj_scales", StDtype::U8,
                     u64s({1, 2 * is, h / 32}), sw1->scales()});
      out.push_back({p + "shared_experts.down_proj_blocks", StDtype::U8, u64s({1, h, is / 32, 16}),
                     sw2->blocks()});
      out.push_back({p + "shared_experts.down_proj_scales", StDtype::U8, u64s({1, h, is / 32}),
                     sw2->scales()});
    }
    ++shard;
    const std::string shard_name =
        fmt::format("model-{:05d}-of-{:05d}.safetensors", shard, moe_layers);
    check_cancelled();
    write_safetensors(tmp + "/" + shard_name, out, {{"format", "pt"}});
    for (const auto& t : out) {
      weight_map[t.name] = shard_name;
      total += t.data.size();
    }
    if (options.progress)
      options.progress(fmt::format(
          "quantize: layer {} ({}/{}): {} experts -> {}, {:.1f} s", layer, shard, moe_layers, e,
          shard_name,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  }

  const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                        {"weight_map", weight_map}};
  files::write_file_atomically(tmp + "/model.safetensors.index.json", index.dump(2) + "\n");

  json::Json cfg = json::parse_strict<LoadError>(config_text, config_path);
  cfg["quantization_config"] = {
      {"quant_method", "mxfp4"},
      {"modules_to_not_convert", {"model.layers.*.self_attn", "model.layers.*.mlp.router"}},
      {"mxmoe_gate_up_layout", "halves"},
      {"mxmoe_scale_rule", options.scale_rule == ScaleRule::floor ? "floor" : "round_up"}};
  if (cfg.contains("text_config")) cfg["text_config"].erase("quantization_config");
  files::write_file_atomically(tmp + "/config.json", cfg.dump(2) + "\n");
  check_cancelled();
  staging.commit(/*replace_existing=*/options.force);
}

}  // namespace mxmoe::io
