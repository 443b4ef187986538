#include "io/quantize_checkpoint.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/file.hpp"
#include "base/json.hpp"
#include "io/checkpoint_file.hpp"
#include "io/checkpoint_writer.hpp"
#include "io/layer_reader.hpp"
#include "io/mapped_file.hpp"
#include "io/tensor_set.hpp"
#include "model/model_config.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/safetensors.hpp"

namespace mxmoe::io {

namespace {

namespace fs = std::filesystem;

const TensorRef& require(const TensorSet& set, const std::string& name, const std::string& dir) {
  const TensorRef* t = set.find(name);
  if (t == nullptr) throw LoadError(dir + ": missing tensor \"" + name + "\"");
  return *t;
}

// Quantizes `rows` rows of `cols` BF16/F32 values of T, starting at row `first` of T (seen as
// [*, cols]), into MXFP4 blocks/scales (rows * cols/2 and rows * cols/32 bytes). NaN/Inf is
// a LoadError naming T and the flat index.
void quantize_rows(const TensorRef& t, std::int64_t first, std::int64_t rows, std::int64_t cols,
                   ScaleRule rule, std::uint8_t* blocks, std::uint8_t* scales,
                   std::vector<float>& row) {
  const auto& info = *t.info;
  const auto bytes = t.data();
  const bool bf16 = info.dtype == StDtype::BF16;
  const auto c = static_cast<std::size_t>(cols);
  row.resize(c);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::size_t k = 0; k < c; ++k) {
      const std::size_t i = static_cast<std::size_t>(first + r) * c + k;
      if (bf16) {
        std::uint16_t v;
        std::memcpy(&v, bytes.data() + 2 * i, 2);
        row[k] = bf16_to_f32(v);
      } else {
        std::memcpy(&row[k], bytes.data() + 4 * i, 4);
      }
      if (!std::isfinite(row[k]))
        throw LoadError(fmt::format("{}: tensor \"{}\" holds NaN or Inf at index {}",
                                    t.file->path(), info.name, i));
    }
    const auto out = static_cast<std::size_t>(r);
    quantize_mxfp4(row, rule, std::span(blocks + out * c / 2, c / 2),
                   std::span(scales + out * c / 32, c / 32));
  }
}

void expect_dense(const TensorRef& t, const std::vector<std::uint64_t>& shape) {
  LayerReader::expect_dtype(t, {StDtype::BF16, StDtype::F32});
  LayerReader::expect_shape(t, shape);
}

// Row-wise MXFP4 quantizer of BF16/F32 [rows, cols] matrices into a growing output.
class ProjectionWriter {
 public:
  ProjectionWriter(std::int64_t matrices, std::int64_t rows, std::int64_t cols, ScaleRule rule)
      : rows_(rows),
        cols_(cols),
        rule_(rule),
        blocks_(static_cast<std::size_t>(matrices * rows * cols / 2)),
        scales_(static_cast<std::size_t>(matrices * rows * cols / 32)) {}

  // Quantizes rows [0, rows) of T into output rows [first_row, first_row + rows) of matrix M.
  void add(const TensorRef& t, std::int64_t m, std::int64_t first_row, std::int64_t rows) {
    expect_dense(t, dims({rows, cols_}));
    const auto out_row = static_cast<std::size_t>(m * rows_ + first_row);
    const auto c = static_cast<std::size_t>(cols_);
    quantize_rows(t, 0, rows, cols_, rule_, blocks_.data() + out_row * c / 2,
                  scales_.data() + out_row * c / 32, row_);
  }
  const std::vector<std::uint8_t>& blocks() const { return blocks_; }
  const std::vector<std::uint8_t>& scales() const { return scales_; }

 private:
  std::int64_t rows_, cols_;
  ScaleRule rule_;
  std::vector<std::uint8_t> blocks_, scales_;
  std::vector<float> row_;
};

// The tensors of one output shard and the buffers they point into.
struct LayerOut {
  std::vector<TensorToWrite> tensors;
  std::vector<std::vector<std::uint8_t>> buffers;  // moved vectors keep their data pointers
  void copy(const std::string& name, const TensorRef& t) {
    tensors.push_back({name, t.info->dtype, t.info->shape, t.data()});
  }
  void add(const std::string& name, StDtype dtype, std::vector<std::uint64_t> shape,
           std::vector<std::uint8_t> data) {
    buffers.push_back(std::move(data));
    tensors.push_back({name, dtype, std::move(shape), buffers.back()});
  }
};

// ---- Mixtral, Qwen3-MoE, DeepSeek-V3: the gpt-oss layout ---------------------------------

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

LayerOut gpt_oss_layout_layer(const TensorSet& set, const LayerSpec& s, int layer,
                              const std::string& in_dir, ScaleRule rule,
                              const std::function<void()>& check_cancelled) {
  const std::int64_t e = s.num_experts, h = s.hidden, i = s.intermediate;
  const SourceNames src = source_names(set, layer);
  ProjectionWriter w1(e, 2 * i, h, rule), w2(e, h, i, rule);
  for (std::int64_t x = 0; x < e; ++x) {
    check_cancelled();
    w1.add(require(set, fmt::format(fmt::runtime(src.gate), x), in_dir), x, 0, i);
    w1.add(require(set, fmt::format(fmt::runtime(src.up), x), in_dir), x, i, i);
    w2.add(require(set, fmt::format(fmt::runtime(src.down), x), in_dir), x, 0, h);
  }
  const std::string p = fmt::format("model.layers.{}.mlp.", layer);
  const TensorRef& router = require(set, src.router, in_dir);
  if (router.info->shape != dims({e, h}) ||
      (router.info->dtype != StDtype::BF16 && router.info->dtype != StDtype::F32))
    throw LoadError(
        fmt::format("{}: tensor \"{}\" must be BF16/F32 [{}, {}]", in_dir, src.router, e, h));
  LayerOut out;
  out.copy(p + "router.weight", router);
  out.add(p + "experts.gate_up_proj_blocks", StDtype::U8, dims({e, 2 * i, h / 32, 16}),
          w1.blocks());
  out.add(p + "experts.gate_up_proj_scales", StDtype::U8, dims({e, 2 * i, h / 32}), w1.scales());
  out.add(p + "experts.down_proj_blocks", StDtype::U8, dims({e, h, i / 32, 16}), w2.blocks());
  out.add(p + "experts.down_proj_scales", StDtype::U8, dims({e, h, i / 32}), w2.scales());
  if (s.routing_params.selection_bias)
    out.copy(p + "router.e_score_correction_bias", require(set, src.selection_bias, in_dir));
  if (s.shared_experts > 0) {
    const std::int64_t is = s.shared_intermediate;
    ProjectionWriter sw1(1, 2 * is, h, rule), sw2(1, h, is, rule);
    sw1.add(require(set, src.shared_gate, in_dir), 0, 0, is);
    sw1.add(require(set, src.shared_up, in_dir), 0, is, is);
    sw2.add(require(set, src.shared_down, in_dir), 0, 0, h);
    out.add(p + "shared_experts.gate_up_proj_blocks", StDtype::U8, dims({1, 2 * is, h / 32, 16}),
            sw1.blocks());
    out.add(p + "shared_experts.gate_up_proj_scales", StDtype::U8, dims({1, 2 * is, h / 32}),
            sw1.scales());
    out.add(p + "shared_experts.down_proj_blocks", StDtype::U8, dims({1, h, is / 32, 16}),
            sw2.blocks());
    out.add(p + "shared_experts.down_proj_scales", StDtype::U8, dims({1, h, is / 32}),
            sw2.scales());
  }
  return out;
}

// ---- DeepSeek-V4: its own naming -----------------------------------------------------------
//
// Reads what transformers' save_pretrained writes (model.layers.N.ffn.experts.E.w1.weight ...,
// or the release's unprefixed layers.N.ffn...), and also transformers' module names
// (model.layers.N.mlp.experts.gate_up_proj [E, 2I, H] fused, gate rows first). Writes the
// release naming (layers.N.ffn...): experts as I8 [N, K/2] + F8_E8M0 [N, K/32], the router,
// selection bias, tid2eid and the shared expert copied as they are.

struct V4Source {
  std::string gate, bias, tid2eid;
  bool fused = false;
  std::string w1, w3, w2;     // per expert, with {} (not fused)
  std::string gate_up, down;  // [E, 2I, H] / [E, H, I] (fused)
  std::string shared[3];      // w1 (gate), w3 (up), w2 (down) .weight names
};

V4Source v4_source(const TensorSet& set, int layer, const std::string& in_dir) {
  for (const std::string root : {"model.", ""}) {
    const std::string p = fmt::format("{}layers.{}.ffn.", root, layer);
    const TensorRef* first = set.find(p + "experts.0.w1.weight");
    if (first == nullptr) continue;
    const StDtype d = first->info->dtype;
    if (d == StDtype::I8 || d == StDtype::U8 || d == StDtype::F4)
      throw LoadError(fmt::format(
          "{}: layer {}'s experts are already FP4 (\"{}experts.0.w1.weight\" is {}): the release "
          "runs as it is (mxmoe run --model {})",
          in_dir, layer, p, to_string(d), in_dir));
    return {p + "gate.weight",
            p + "gate.bias",
            p + "gate.tid2eid",
            false,
            p + "experts.{}.w1.weight",
            p + "experts.{}.w3.weight",
            p + "experts.{}.w2.weight",
            "",
            "",
            {p + "shared_experts.w1.weight", p + "shared_experts.w3.weight",
             p + "shared_experts.w2.weight"}};
  }
  const std::string p = fmt::format("model.layers.{}.mlp.", layer);
  if (set.find(p + "experts.gate_up_proj") != nullptr)
    return {p + "gate.weight",
            p + "gate.e_score_correction_bias",
            p + "gate.tid2eid",
            true,
            "",
            "",
            "",
            p + "experts.gate_up_proj",
            p + "experts.down_proj",
            {p + "shared_experts.gate_proj.weight", p + "shared_experts.up_proj.weight",
             p + "shared_experts.down_proj.weight"}};
  throw LoadError(fmt::format(
      "{}: missing tensor \"model.layers.{}.ffn.experts.0.w1.weight\" (DeepSeek-V4 experts; "
      "also looked for \"layers.{}.ffn.experts.0.w1.weight\" and \"{}experts.gate_up_proj\")",
      in_dir, layer, layer, p));
}

LayerOut deepseek_v4_layer(const TensorSet& set, const LayerSpec& s, int layer,
                           const std::string& in_dir, ScaleRule rule,
                           const std::function<void()>& check_cancelled) {
  const std::int64_t e = s.num_experts, h = s.hidden, i = s.intermediate;
  const V4Source src = v4_source(set, layer, in_dir);
  const std::string p = fmt::format("layers.{}.ffn.", layer);
  LayerOut out;
  const TensorRef& router = require(set, src.gate, in_dir);
  expect_dense(router, dims({e, h}));
  out.copy(p + "gate.weight", router);
  if (s.routing == RoutingMethod::hash) {
    const TensorRef& t = require(set, src.tid2eid, in_dir);
    LayerReader::expect_dtype(t, {StDtype::I32, StDtype::I64});
    LayerReader::expect_shape(t, dims({s.vocab, s.top_k}));
    out.copy(p + "gate.tid2eid", t);
  } else {
    const TensorRef& bias = require(set, src.bias, in_dir);
    expect_dense(bias, dims({e}));
    out.copy(p + "gate.bias", bias);
  }
  std::vector<float> row;
  const auto fp4 = [&](const std::string& name, const TensorRef& t, std::int64_t first,
                       std::int64_t rows, std::int64_t cols) {
    std::vector<std::uint8_t> blocks(static_cast<std::size_t>(rows * cols / 2));
    std::vector<std::uint8_t> scales(static_cast<std::size_t>(rows * cols / 32));
    quantize_rows(t, first, rows, cols, rule, blocks.data(), scales.data(), row);
    out.add(name + ".weight", StDtype::I8, dims({rows, cols / 2}), std::move(blocks));
    out.add(name + ".scale", StDtype::F8_E8M0, dims({rows, cols / 32}), std::move(scales));
  };
  if (src.fused) {
    const TensorRef& gate_up = require(set, src.gate_up, in_dir);
    const TensorRef& down = require(set, src.down, in_dir);
    expect_dense(gate_up, dims({e, 2 * i, h}));
    expect_dense(down, dims({e, h, i}));
    for (std::int64_t x = 0; x < e; ++x) {
      check_cancelled();
      const std::string at = fmt::format("{}experts.{}.", p, x);
      fp4(at + "w1", gate_up, x * 2 * i, i, h);
      fp4(at + "w3", gate_up, x * 2 * i + i, i, h);
      fp4(at + "w2", down, x * h, h, i);
    }
  } else {
    for (std::int64_t x = 0; x < e; ++x) {
      check_cancelled();
      const std::string at = fmt::format("{}experts.{}.", p, x);
      const TensorRef& w1 = require(set, fmt::format(fmt::runtime(src.w1), x), in_dir);
      const TensorRef& w3 = require(set, fmt::format(fmt::runtime(src.w3), x), in_dir);
      const TensorRef& w2 = require(set, fmt::format(fmt::runtime(src.w2), x), in_dir);
      expect_dense(w1, dims({i, h}));
      expect_dense(w3, dims({i, h}));
      expect_dense(w2, dims({h, i}));
      fp4(at + "w1", w1, 0, i, h);
      fp4(at + "w3", w3, 0, i, h);
      fp4(at + "w2", w2, 0, h, i);
    }
  }
  if (s.shared_experts > 0) {
    // Kept in its own dtype (BF16/F32, or FP8 E4M3 with its block scales): mxmoe reads it so.
    const char* out_names[3] = {"w1", "w3", "w2"};
    for (int j = 0; j < 3; ++j) {
      const TensorRef& t = require(set, src.shared[j], in_dir);
      out.copy(p + "shared_experts." + out_names[j] + ".weight", t);
      const std::string scale = src.shared[j].substr(0, src.shared[j].size() - 6) + "scale";
      if (const TensorRef* sc = set.find(scale))
        out.copy(p + "shared_experts." + out_names[j] + ".scale", *sc);
    }
  }
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
  // Refuses an existing OUT without --force (and one that is not a directory) first.
  CheckpointDirectoryWriter writer(out_dir, options.force);
  if (out_exists && fs::equivalent(out_dir, in_dir, ec))
    throw LoadError(out_dir + ": the output directory is the input directory");
  {
    // Replacing a directory that holds the input would delete the input.
    const std::string in_real = fs::weakly_canonical(in_dir, ec).string() + "/";
    const std::string out_real = fs::weakly_canonical(out_dir, ec).string() + "/";
    if (in_real.rfind(out_real, 0) == 0)
      throw LoadError(out_dir + ": the output directory contains the input directory " + in_dir);
  }
  const std::function<void()> check_cancelled = [&] {
    if (options.cancelled && options.cancelled())
      throw QuantizeCancelled("quantize: interrupted; " + out_dir +
                              (out_exists ? " is left as it was" : " was not created"));
  };

  const bool v4 = config.moe.family == Family::deepseek_v4;
  int moe_layers = 0;
  for (const auto& why : config.non_moe_reason) moe_layers += why.empty() ? 1 : 0;

  int shard = 0;
  for (int layer = 0; layer < config.num_layers; ++layer) {
    if (!config.non_moe_reason[static_cast<std::size_t>(layer)].empty()) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const LayerSpec& s = config.spec_of(layer);
    const LayerOut out =
        v4 ? deepseek_v4_layer(set, s, layer, in_dir, options.scale_rule, check_cancelled)
           : gpt_oss_layout_layer(set, s, layer, in_dir, options.scale_rule, check_cancelled);
    ++shard;
    const std::string shard_name =
        fmt::format("model-{:05d}-of-{:05d}.safetensors", shard, moe_layers);
    check_cancelled();
    writer.add_shard(shard_name, out.tensors);
    if (options.progress)
      options.progress(fmt::format(
          "quantize: layer {} ({}/{}): {} experts{} -> {}, {:.1f} s", layer, shard, moe_layers,
          s.num_experts, s.routing == RoutingMethod::hash ? " (hash-routed)" : "", shard_name,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  }

  json::Json cfg = json::parse_strict<LoadError>(config_text, config_path);
  cfg["quantization_config"] = {
      {"quant_method", "mxfp4"},
      {"modules_to_not_convert",
       v4 ? json::Json::array({"layers.*.attn", "layers.*.ffn.gate", "layers.*.ffn.shared_experts"})
          : json::Json::array({"model.layers.*.self_attn", "model.layers.*.mlp.router"})},
      {"mxmoe_gate_up_layout", "halves"},
      {"mxmoe_scale_rule", options.scale_rule == ScaleRule::floor ? "floor" : "round_up"}};
  if (cfg.contains("text_config")) cfg["text_config"].erase("quantization_config");
  check_cancelled();
  writer.finish(cfg.dump(2) + "\n", /*with_index=*/true);
}

}  // namespace mxmoe::io
