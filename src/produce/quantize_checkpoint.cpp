#include "produce/quantize_checkpoint.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/file.hpp"
#include "base/json.hpp"
#include "base/mapped_reads.hpp"
#include "io/checkpoint_file.hpp"
#include "io/layer_reader.hpp"
#include "io/mapped_file.hpp"
#include "io/model_dir.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_set.hpp"
#include "model/model_config.hpp"
#include "mxmoe/checkpoint.hpp"
#include "produce/checkpoint_writer.hpp"

namespace mxmoe::produce {

// The read path (src/io) that the input checkpoint is read through.
using io::checkpoint_file;
using io::dims;
using io::layer_of;
using io::LayerReader;
using io::read_text_file;
using io::require_tensors_within_layers;
using io::TensorRef;
using io::TensorSet;

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
  // The output, moved out (one copy of a layer's MXFP4 bytes in memory, not two).
  std::vector<std::uint8_t> take_blocks() { return std::move(blocks_); }
  std::vector<std::uint8_t> take_scales() { return std::move(scales_); }

 private:
  std::int64_t rows_, cols_;
  ScaleRule rule_;
  std::vector<std::uint8_t> blocks_, scales_;
  std::vector<float> row_;
};

// The MoE tensors of one layer's shard and the buffers they point into, with the input
// tensors they were made from: `quantized` (the routed experts: not copied to OUT) and
// `copied_from` (tensor i's input, or nullptr for one computed here).
struct LayerOut {
  std::vector<TensorToWrite> tensors;
  std::vector<const TensorRef*> copied_from;
  std::vector<std::vector<std::uint8_t>> buffers;  // moved vectors keep their data pointers
  std::vector<const TensorRef*> quantized;
  std::size_t released = 0;  // quantized[0, released) had their pages dropped
  void copy(const std::string& name, const TensorRef& t) {
    tensors.push_back({name, t.info->dtype, t.info->shape, t.data()});
    copied_from.push_back(&t);
  }
  // T, an expert weight of the input, is quantized into this layer (and not copied as it is).
  const TensorRef& quantizes(const TensorRef& t) {
    quantized.push_back(&t);
    return t;
  }
  // Drops the pages of the expert weights quantized so far from memory (they are read once), so
  // a layer's input experts are not all resident at the end of the layer.
  void release_quantized() {
    for (; released < quantized.size(); ++released)
      (void)quantized[released]->file->drop_resident(quantized[released]->data());
  }
  void add(const std::string& name, StDtype dtype, std::vector<std::uint64_t> shape,
           std::vector<std::uint8_t> data) {
    buffers.push_back(std::move(data));
    tensors.push_back({name, dtype, std::move(shape), buffers.back()});
    copied_from.push_back(nullptr);
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
  LayerOut out;
  ProjectionWriter w1(e, 2 * i, h, rule), w2(e, h, i, rule);
  for (std::int64_t x = 0; x < e; ++x) {
    check_cancelled();
    const auto expert = [&](const std::string& name) -> const TensorRef& {
      return out.quantizes(require(set, fmt::format(fmt::runtime(name), x), in_dir));
    };
    w1.add(expert(src.gate), x, 0, i);
    w1.add(expert(src.up), x, i, i);
    w2.add(expert(src.down), x, 0, h);
    out.release_quantized();
  }
  const std::string p = fmt::format("model.layers.{}.mlp.", layer);
  const TensorRef& router = require(set, src.router, in_dir);
  if (router.info->shape != dims({e, h}) ||
      (router.info->dtype != StDtype::BF16 && router.info->dtype != StDtype::F32))
    throw LoadError(
        fmt::format("{}: tensor \"{}\" must be BF16/F32 [{}, {}]", in_dir, src.router, e, h));
  out.copy(p + "router.weight", router);
  out.add(p + "experts.gate_up_proj_blocks", StDtype::U8, dims({e, 2 * i, h / 32, 16}),
          w1.take_blocks());
  out.add(p + "experts.gate_up_proj_scales", StDtype::U8, dims({e, 2 * i, h / 32}),
          w1.take_scales());
  out.add(p + "experts.down_proj_blocks", StDtype::U8, dims({e, h, i / 32, 16}), w2.take_blocks());
  out.add(p + "experts.down_proj_scales", StDtype::U8, dims({e, h, i / 32}), w2.take_scales());
  if (s.routing_params.selection_bias)
    out.copy(p + "router.e_score_correction_bias", require(set, src.selection_bias, in_dir));
  if (s.shared_experts > 0) {
    // mxmoe's fused MXFP4 shared expert (what the gpt-oss layout reads); the input's own
    // shared-expert tensors are copied beside it, unchanged, under their names.
    const std::int64_t is = s.shared_intermediate;
    ProjectionWriter sw1(1, 2 * is, h, rule), sw2(1, h, is, rule);
    sw1.add(require(set, src.shared_gate, in_dir), 0, 0, is);
    sw1.add(require(set, src.shared_up, in_dir), 0, is, is);
    sw2.add(require(set, src.shared_down, in_dir), 0, 0, h);
    out.add(p + "shared_experts.gate_up_proj_blocks", StDtype::U8, dims({1, 2 * is, h / 32, 16}),
            sw1.take_blocks());
    out.add(p + "shared_experts.gate_up_proj_scales", StDtype::U8, dims({1, 2 * is, h / 32}),
            sw1.take_scales());
    out.add(p + "shared_experts.down_proj_blocks", StDtype::U8, dims({1, h, is / 32, 16}),
            sw2.take_blocks());
    out.add(p + "shared_experts.down_proj_scales", StDtype::U8, dims({1, h, is / 32}),
            sw2.take_scales());
  }
  return out;
}

// ---- DeepSeek-V4: its own naming -----------------------------------------------------------
//
// Reads what transformers' save_pretrained writes (model.layers.N.ffn.experts.E.w1.weight ...,
// or the release's unprefixed layers.N.ffn...), and also transformers' module names
// (model.layers.N.mlp.experts.gate_up_proj [E, 2I, H] fused, gate rows first). Writes DeepSeek's
// naming under the input's root (model.layers.N.ffn... for a save_pretrained input, the
// release's layers.N.ffn... for the release naming and for the module names): experts as
// I8 [N, K/2] + F8_E8M0 [N, K/32], and the router, selection bias, tid2eid and shared expert as
// they are (in DeepSeek's naming these are the input's own tensors, written once).

struct V4Source {
  std::string root;  // of the names written: "model." or ""
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
    return {root,
            p + "gate.weight",
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
    return {"",
            p + "gate.weight",
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
  const std::string p = fmt::format("{}layers.{}.ffn.", src.root, layer);
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
    const TensorRef& gate_up = out.quantizes(require(set, src.gate_up, in_dir));
    const TensorRef& down = out.quantizes(require(set, src.down, in_dir));
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
      const auto expert = [&](const std::string& name) -> const TensorRef& {
        return out.quantizes(require(set, fmt::format(fmt::runtime(name), x), in_dir));
      };
      const TensorRef& w1 = expert(src.w1);
      const TensorRef& w3 = expert(src.w3);
      const TensorRef& w2 = expert(src.w2);
      expect_dense(w1, dims({i, h}));
      expect_dense(w3, dims({i, h}));
      expect_dense(w2, dims({h, i}));
      fp4(at + "w1", w1, 0, i, h);
      fp4(at + "w3", w3, 0, i, h);
      fp4(at + "w2", w2, 0, h, i);
      out.release_quantized();
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

// ---- the rest of the model: every other tensor and file, copied unchanged -----------------

constexpr std::uint64_t kRestShardBytes = 4'000'000'000;

// Files of IN that are model weights in another format (they would hold the unquantized
// experts) or the safetensors themselves: never copied.
bool is_weight_file(const std::string& name) {
  for (const char* suffix : {".safetensors", ".safetensors.index.json", ".bin", ".bin.index.json",
                             ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx"})
    if (name.size() >= std::strlen(suffix) &&
        name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
      return true;
  return false;
}

// Where a link among IN's other files may lead: inside IN, or, when IN is a Hugging Face
// cache snapshot (<repo>/snapshots/<rev>/, every file a link), into <repo>/blobs/. Anywhere
// else (`notes.txt -> /proc/self/environ`, `tokenizer.json -> /etc/passwd`) a hostile
// repository would have the user's files copied into the output they then upload.
std::vector<fs::path> link_roots(const std::string& in_dir) {
  std::error_code ec;
  const fs::path dir = fs::canonical(in_dir, ec);
  if (ec)
    throw LoadError(files::printable(in_dir) + ": cannot resolve the directory: " + ec.message());
  std::vector<fs::path> roots{dir};
  if (dir.parent_path().filename() == "snapshots") {
    const fs::path blobs = fs::weakly_canonical(dir.parent_path().parent_path() / "blobs", ec);
    if (!ec) roots.push_back(blobs);
  }
  return roots;
}

bool lies_within(const fs::path& path, const fs::path& root) {
  auto r = root.begin();
  for (auto p = path.begin(); r != root.end(); ++r, ++p)
    if (p == path.end() || *p != *r) return false;
  return true;
}

// Copies every other file at the top of IN (tokenizer, generation config, chat template,
// vocab/merges, README, ...) into the writer, byte for byte. Links are followed only where
// link_roots allows (a Hugging Face cache snapshot links every file into its blobs); what a
// name resolves to must be a readable regular file of at most kMaxExtraFileBytes, else the
// conversion stops naming it. Directories, weight files, links that lead out of IN and names
// holding a line break are left out, said in `progress`.
void copy_other_files(const std::string& in_dir, CheckpointDirectoryWriter& writer,
                      const std::function<void(const std::string&)>& progress) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(in_dir, ec))
    names.push_back(e.path().filename().string());
  if (ec) throw LoadError(in_dir + ": cannot list the directory: " + ec.message());
  std::sort(names.begin(), names.end());
  const std::vector<fs::path> roots = link_roots(in_dir);
  std::vector<std::string> copied, left_out, links_out, unlisted;
  for (const std::string& name : names) {
    if (name == "config.json" || name == kCheckpointMarker ||
        name.find(".mxmoe-tmp-") != std::string::npos)
      continue;
    std::string path = in_dir + "/" + name;
    if (name.find_first_of("\n\r") != std::string::npos) {
      // OUT's marker lists one name a line (--force reads it back): such a name would be
      // listed as two.
      unlisted.push_back(files::printable(name));
      continue;
    }
    if (is_weight_file(name)) {
      if (name.find(".safetensors") == std::string::npos)
        left_out.push_back(files::printable(name));
      continue;
    }
    if (fs::is_symlink(fs::symlink_status(path, ec))) {
      const fs::path target = fs::canonical(path, ec);
      if (!ec) {  // a dangling link is refused below, by the read
        if (std::none_of(roots.begin(), roots.end(),
                         [&](const fs::path& root) { return lies_within(target, root); })) {
          links_out.push_back(files::printable(name) + " -> " + files::printable(target.string()));
          continue;
        }
        path = target.string();  // what was checked is what is read
      }
    }
    if (fs::is_directory(fs::status(path, ec))) {
      left_out.push_back(files::printable(name) + "/");
      continue;
    }
    std::string error;
    const std::optional<std::string> bytes =
        files::try_read_regular_file(path, kMaxExtraFileBytes, error);
    if (!bytes)
      throw LoadError(error +
                      " (every file of IN but its weights is copied to OUT; remove or "
                      "move this one away)");
    writer.add_file(name, *bytes);
    copied.push_back(files::printable(name));
  }
  if (progress && !copied.empty())
    progress(fmt::format("quantize: copied {}", fmt::join(copied, ", ")));
  if (progress && !left_out.empty())
    progress(fmt::format("quantize: not copied (directories, weights in other formats): {}",
                         fmt::join(left_out, ", ")));
  if (progress && !unlisted.empty())
    progress(
        fmt::format("quantize: not copied (names holding a line break, which the "
                    "output's list of its files cannot hold): {}",
                    fmt::join(unlisted, ", ")));
  if (progress && !links_out.empty())
    progress(
        fmt::format("quantize: not copied (links that lead out of the model directory, "
                    "which could hold anyone's files): {}",
                    fmt::join(links_out, ", ")));
}

// The input tensors of layer N that OUT keeps as they are: every one of the layer's tensors
// but the quantized experts. A name mxmoe writes itself is kept only when it is that very
// tensor (DeepSeek-V4's router and shared expert, in its own naming); another tensor of that
// name would be lost, so it is an error.
std::vector<const TensorRef*> kept_tensors(const std::vector<const TensorRef*>& layer_tensors,
                                           const LayerOut& moe, const std::string& in_dir) {
  std::map<std::string_view, const TensorRef*> written;
  for (std::size_t k = 0; k < moe.tensors.size(); ++k)
    written.emplace(moe.tensors[k].name, moe.copied_from[k]);
  std::vector<const TensorRef*> kept;
  for (const TensorRef* t : layer_tensors) {
    if (std::find(moe.quantized.begin(), moe.quantized.end(), t) != moe.quantized.end()) continue;
    const auto same = written.find(t->info->name);
    if (same == written.end()) {
      kept.push_back(t);
    } else if (same->second != t) {
      throw LoadError(
          fmt::format("{}: tensor \"{}\" has the name of a tensor `mxmoe quantize` writes itself",
                      in_dir, t->info->name));
    }
  }
  return kept;
}

}  // namespace

// The shards of OUT: one per layer that has tensors (its MoE tensors and its other tensors),
// then the tensors outside the layers in shards of at most kRestShardBytes.
void write_shards(const TensorSet& set, const ModelConfig& config, const std::string& in_dir,
                  CheckpointDirectoryWriter& writer, const QuantizeOptions& options,
                  const std::function<void()>& check_cancelled) {
  const auto layers = static_cast<std::size_t>(config.num_layers);
  std::vector<std::vector<const TensorRef*>> by_layer(layers);
  std::vector<const TensorRef*> rest;
  for (const auto& [name, ref] : set.tensors()) {
    const int n = layer_of(name);
    if (n >= 0 && static_cast<std::size_t>(n) < layers)
      by_layer[static_cast<std::size_t>(n)].push_back(&ref);
    else
      rest.push_back(&ref);  // beyond num_hidden_layers too (DeepSeek's MTP layer), as it is
  }
  const auto is_moe = [&](std::size_t n) { return config.non_moe_reason[n].empty(); };
  std::size_t layer_shards = 0;
  for (std::size_t n = 0; n < layers; ++n) layer_shards += is_moe(n) || !by_layer[n].empty();
  std::vector<std::uint64_t> rest_sizes;
  for (const TensorRef* t : rest) rest_sizes.push_back(t->info->bytes());
  const std::vector<std::size_t> rest_first = pack_shards(rest_sizes, kRestShardBytes);
  const std::size_t shards = layer_shards + rest_first.size();

  ProgressMeter meter("quantize", set.tensor_bytes(), options.progress);
  // A copied tensor's pages are released once written, so the mapping of IN does not stay
  // resident: the copy streams.
  const auto copied = [&](const TensorRef* t) {
    return planned_copy({t->info->name, t->info->dtype, t->info->shape}, t->data(),
                        [&meter, t](std::span<const std::uint8_t> piece) {
                          meter.add(piece.size());
                          (void)t->file->drop_resident(piece);
                        });
  };
  const bool v4 = config.moe.family == Family::deepseek_v4;
  std::size_t shard = 0;
  for (std::size_t n = 0; n < layers; ++n) {
    if (!is_moe(n) && by_layer[n].empty()) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const int layer = static_cast<int>(n);
    LayerOut moe;
    if (is_moe(n)) {
      const LayerSpec& s = config.spec_of(layer);
      moe = v4 ? deepseek_v4_layer(set, s, layer, in_dir, options.scale_rule, check_cancelled)
               : gpt_oss_layout_layer(set, s, layer, in_dir, options.scale_rule, check_cancelled);
      moe.release_quantized();  // the fused ones (DeepSeek-V4's module names) are read whole
      for (const TensorRef* t : moe.quantized) meter.add(t->info->bytes());
    }
    const std::vector<const TensorRef*> kept = kept_tensors(by_layer[n], moe, in_dir);
    std::vector<PlannedTensor> planned;
    for (const TensorToWrite& t : moe.tensors)
      planned.push_back(planned_copy({t.name, t.dtype, t.shape}, t.data));
    for (const TensorRef* t : by_layer[n])  // written within the MoE tensors: counted here
      if (std::find(kept.begin(), kept.end(), t) == kept.end() &&
          std::find(moe.quantized.begin(), moe.quantized.end(), t) == moe.quantized.end())
        meter.add(t->info->bytes());
    for (const TensorRef* t : kept) planned.push_back(copied(t));
    const std::string file = shard_file_name(++shard, shards);
    writer.add_shard(file, planned);
    if (!options.progress) continue;
    const std::string what =
        is_moe(n)
            ? fmt::format(
                  "{} experts{}", config.spec_of(layer).num_experts,
                  config.spec_of(layer).routing == RoutingMethod::hash ? " (hash-routed)" : "")
            : "not a MoE layer";
    options.progress(
        fmt::format("quantize: layer {} ({}/{}): {}, {} tensors copied -> {}, {:.1f} s; {}", layer,
                    shard, shards, what, kept.size(), file,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                    meter.fraction()));
  }
  for (std::size_t k = 0; k < rest_first.size(); ++k) {
    const std::size_t end = k + 1 < rest_first.size() ? rest_first[k + 1] : rest.size();
    std::vector<PlannedTensor> planned;
    for (std::size_t j = rest_first[k]; j < end; ++j) planned.push_back(copied(rest[j]));
    const std::string file = shard_file_name(++shard, shards);
    writer.add_shard(file, planned);
    if (options.progress)
      options.progress(fmt::format("quantize: {} tensors outside the layers -> {}; {}",
                                   end - rest_first[k], file, meter.fraction()));
  }
}

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
  require_tensors_within_layers(set, config, in_dir);

  // Replacing a directory that is or holds the input would delete the input.
  if (const auto input = files::input_destroyed_by(out_dir, {{"the input directory", in_dir}}))
    throw LoadError(files::printable(out_dir) + ": the output directory is or contains " +
                    input->what + " " + files::printable(in_dir));
  // Refuses an existing OUT without --force (and one it may not replace) first.
  CheckpointDirectoryWriter writer(out_dir, options.force);
  const bool out_exists = writer.replaces_existing();
  // Every read of IN's mappings is guarded: a shard that shrinks while it is read (rewritten,
  // truncated) ends the conversion at the next poll with a LoadError naming it, before anything
  // is committed, not with a bus error (base/mapped_reads.hpp).
  const std::vector<int> slots = set.mapped_slots();
  const std::function<void()> check_cancelled = [&] {
    mapped_reads::throw_if_faulted(slots);
    if (options.cancelled && options.cancelled())
      throw QuantizeCancelled("quantize: interrupted; " + out_dir +
                              (out_exists ? " is left as it was" : " was not created"));
  };
  writer.set_poll(check_cancelled);
  copy_other_files(in_dir, writer, options.progress);

  mapped_reads::read_guarded(
      slots, [&] { write_shards(set, config, in_dir, writer, options, check_cancelled); });

  const bool v4 = config.moe.family == Family::deepseek_v4;
  const auto is_moe = [&](std::size_t n) { return config.non_moe_reason[n].empty(); };
  json::Json cfg = json::parse_strict<LoadError>(config_text, config_path);
  std::string root;  // DeepSeek-V4's names: "model." or "" (v4_source)
  for (int n = 0; v4 && n < config.num_layers; ++n)
    if (is_moe(static_cast<std::size_t>(n))) {
      root = v4_source(set, n, in_dir).root;
      break;
    }
  cfg["quantization_config"] = {
      {"quant_method", "mxfp4"},
      {"modules_to_not_convert",
       v4 ? json::Json::array({root + "layers.*.attn", root + "layers.*.ffn.gate",
                               root + "layers.*.ffn.shared_experts"})
          : json::Json::array({"model.layers.*.self_attn", "model.layers.*.mlp.router"})},
      {"mxmoe_gate_up_layout", "halves"},
      {"mxmoe_scale_rule", options.scale_rule == ScaleRule::floor ? "floor" : "round_up"}};
  if (cfg.contains("text_config")) cfg["text_config"].erase("quantization_config");
  check_cancelled();
  writer.finish(cfg.dump(2) + "\n", /*with_index=*/true);
}

}  // namespace mxmoe::produce
