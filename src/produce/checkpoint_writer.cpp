#include "produce/checkpoint_writer.hpp"

#include <fmt/core.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "base/file.hpp"
#include "base/json.hpp"
#include "model/generation_poll.hpp"
#include "model/model_config.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/format.hpp"
#include "produce/config_writer.hpp"
#include "produce/full_checkpoint.hpp"

namespace mxmoe::produce {
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
    const std::size_t element = v.element_bytes();  // refuses a type a DenseView cannot hold
    const auto* p = static_cast<const std::uint8_t*>(v.data);
    add(suffix, v.dtype == ElementType::f32 ? StDtype::F32 : StDtype::BF16, std::move(shape),
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
        if (r == 0) model::GenerationPoll::poll();  // each expert: a generator stops here too
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
  if (v.element != ElementType::fp8_e4m3 || !v.scale_e8m0)
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
    if (spec.shared_weight_format == ElementType::mxfp4) {
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

PlannedTensor planned_copy(io::TensorHeader header, std::span<const std::uint8_t> data,
                           std::function<void(std::span<const std::uint8_t>)> after_piece) {
  if (tensor_byte_size(header) != data.size())
    throw std::invalid_argument(fmt::format("tensor \"{}\" has {} bytes, its shape x {} needs {}",
                                            header.name, data.size(), to_string(header.dtype),
                                            tensor_byte_size(header)));
  return {std::move(header), [data, after = std::move(after_piece)](const ByteSink& emit) {
            for (std::size_t at = 0; at < data.size(); at += kWritePieceBytes) {
              const auto piece = data.subspan(at, std::min(kWritePieceBytes, data.size() - at));
              emit(piece);
              if (after) after(piece);
            }
          }};
}

std::vector<std::size_t> pack_shards(std::span<const std::uint64_t> sizes,
                                     std::uint64_t max_bytes) {
  std::vector<std::size_t> first;
  std::uint64_t in_shard = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (first.empty() || (in_shard > 0 && in_shard + sizes[i] > max_bytes)) {
      first.push_back(i);
      in_shard = 0;
    }
    in_shard += sizes[i];
  }
  return first;
}

std::string shard_file_name(std::size_t index, std::size_t count) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index, count);
}

ProgressMeter::ProgressMeter(std::string label, std::uint64_t total,
                             std::function<void(const std::string&)> progress, std::uint64_t step)
    : label_(std::move(label)),
      total_(total),
      step_(std::max<std::uint64_t>(step, 1)),
      next_(step_),
      progress_(std::move(progress)) {}

void ProgressMeter::add(std::uint64_t bytes) {
  done_ += bytes;
  if (done_ < next_ || done_ >= total_) return;
  next_ = (done_ / step_ + 1) * step_;
  if (progress_) progress_(label_ + ": " + fraction());
}

std::string ProgressMeter::fraction() const {
  const double percent =
      total_ == 0 ? 100.0 : 100.0 * static_cast<double>(done_) / static_cast<double>(total_);
  // One unit for both numbers, the total's.
  const auto [unit, name] = total_ >= 1'000'000'000 ? std::pair{1e9, "GB"}
                            : total_ >= 1'000'000   ? std::pair{1e6, "MB"}
                                                    : std::pair{1e3, "KB"};
  return fmt::format("{:.2f}/{:.2f} {} ({:.0f}%)", static_cast<double>(done_) / unit,
                     static_cast<double>(total_) / unit, name, percent);
}

namespace {

// "a, b, c and 4 more": the first entries of DIR, sorted, for a refusal that names them.
std::string first_entries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    names.push_back(files::printable(e.path().filename().string()) +
                    (e.is_directory(ec) && !e.is_symlink(ec) ? "/" : ""));
  std::sort(names.begin(), names.end());
  std::string text;
  for (std::size_t k = 0; k < names.size() && k < 5; ++k) text += (k ? ", " : "") + names[k];
  if (names.size() > 5) text += fmt::format(" and {} more", names.size() - 5);
  return text;
}

constexpr std::string_view kMarkerHeader =
    "written by mxmoe; --force may replace this directory whole; the entries it wrote:";

// The names a valid marker in DIR lists (its first line kMarkerHeader, then one name a line);
// std::nullopt when there is none, it is not a regular file, or it is not of this form (an
// empty file of that name marks nothing).
std::optional<std::set<std::string>> marker_listing(const std::string& dir) {
  const std::string path = dir + "/" + kCheckpointMarker;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 20))
    return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  std::string line;
  if (!std::getline(in, line) || line != kMarkerHeader) return std::nullopt;
  std::set<std::string> names;
  while (std::getline(in, line))
    if (!line.empty()) names.insert(line);
  return names;
}

// Checks OUT before any work: whether it exists, and that --force may replace it (only a
// directory this writer wrote, with its marker, or an empty one; never a link, a directory
// holding the current one, or anything else). Returns whether OUT exists.
bool check_replaceable(const std::string& out, bool force) {
  const std::string shown = files::printable(out);
  struct stat st {};
  if (::lstat(out.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    throw LoadError(fmt::format("cannot create {}: {}", shown, std::strerror(errno)));
  }
  if (S_ISLNK(st.st_mode)) {
    struct stat target {};
    const bool loop = ::stat(out.c_str(), &target) != 0 && errno == ELOOP;
    throw LoadError(fmt::format(
        "{}: a symbolic link{}; the output must be the directory itself (nothing was written)",
        shown, loop ? " in a loop of links (Too many levels of symbolic links)" : ""));
  }
  if (!force) throw LoadError(shown + ": already exists (pass --force to replace it whole)");
  if (!S_ISDIR(st.st_mode))
    throw LoadError(shown + ": exists and is not a directory (--force replaces a directory only)");
  if (const auto cwd = files::input_destroyed_by(out, {{"the current directory", "."}}))
    throw LoadError(fmt::format("{}: is or contains {}; --force would delete it", shown,
                                cwd->what));
  const std::string entries = first_entries(out);
  if (entries.empty()) return true;
  const std::optional<std::set<std::string>> written = marker_listing(out);
  if (!written)
    throw LoadError(fmt::format(
        "{}: not a checkpoint mxmoe wrote (no valid {}), it holds {}; --force replaces only a "
        "directory mxmoe wrote or an empty one: remove it yourself or choose another output",
        shown, kCheckpointMarker, entries));
  // Everything in OUT must be what the marker lists: a file a user added beside mxmoe's (notes,
  // a folder) is theirs, and --force would delete it.
  std::vector<std::string> added;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (name != kCheckpointMarker && !written->contains(name))
      added.push_back(files::printable(name) + (e.is_directory(ec) && !e.is_symlink(ec) ? "/" : ""));
  }
  if (ec) throw LoadError(fmt::format("cannot list {}: {}", shown, ec.message()));
  std::sort(added.begin(), added.end());
  if (!added.empty()) {
    std::string text;
    for (std::size_t k = 0; k < added.size() && k < 5; ++k) text += (k ? ", " : "") + added[k];
    if (added.size() > 5) text += fmt::format(" and {} more", added.size() - 5);
    throw LoadError(fmt::format(
        "{}: holds {} that mxmoe did not write ({}); --force would delete them: move them or "
        "choose another output",
        shown, added.size() == 1 ? "an entry" : "entries", text));
  }
  return true;
}

}  // namespace

CheckpointDirectoryWriter::CheckpointDirectoryWriter(const std::string& out, bool force)
    : force_(force), out_exists_(check_replaceable(out, force)), staging_(out) {}

void CheckpointDirectoryWriter::add_shard(const std::string& file,
                                          std::span<const PlannedTensor> tensors) {
  poll();
  std::vector<io::TensorHeader> headers;
  headers.reserve(tensors.size());
  for (const PlannedTensor& t : tensors) {
    if (weight_map_.contains(t.header.name))
      throw std::invalid_argument(fmt::format("tensor \"{}\" is written twice ({} and {})",
                                              t.header.name,
                                              weight_map_[t.header.name].get<std::string>(), file));
    headers.push_back(t.header);
  }
  io::SafetensorsStreamWriter out(staging_.path() + "/" + file, headers, {{"format", "pt"}});
  const ByteSink emit = [&](std::span<const std::uint8_t> piece) {
    poll();
    out.write(piece);
  };
  for (const PlannedTensor& t : tensors) t.fill(emit);
  out.commit();
  for (const io::TensorHeader& t : headers) weight_map_[t.name] = file;
  total_ += out.data_bytes();
}

void CheckpointDirectoryWriter::add_shard(const std::string& file,
                                          const std::vector<TensorToWrite>& tensors) {
  std::vector<PlannedTensor> planned;
  planned.reserve(tensors.size());
  for (const TensorToWrite& t : tensors)
    planned.push_back(planned_copy({t.name, t.dtype, t.shape}, t.data));
  add_shard(file, planned);
}

void CheckpointDirectoryWriter::add_file(const std::string& file, std::string_view contents) {
  poll();
  if (file.find_first_of("\n\r") != std::string::npos)  // the marker lists one name a line
    throw std::invalid_argument(files::printable(file) + ": a file name with a line break");
  files::write_file_atomically(staging_.path() + "/" + file, contents);
}

void CheckpointDirectoryWriter::finish(const std::string& config_json, bool with_index) {
  poll();
  if (with_index)
    files::write_file_atomically(
        staging_.path() + "/model.safetensors.index.json",
        json::Json{{"metadata", {{"total_size", total_}}}, {"weight_map", weight_map_}}.dump(2) +
            "\n");
  files::write_file_atomically(staging_.path() + "/config.json", config_json);
  // The marker lists every entry written, so that --force can tell them from a user's.
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(staging_.path(), ec))
    names.push_back(e.path().filename().string());
  if (ec) throw LoadError(fmt::format("cannot list {}: {}", staging_.path(), ec.message()));
  std::sort(names.begin(), names.end());
  std::string marker(kMarkerHeader);
  marker += '\n';
  for (const std::string& n : names) marker += n + '\n';
  files::write_file_atomically(staging_.path() + "/" + kCheckpointMarker, marker);
  poll();  // a signal during the last files still leaves OUT as it was
  staging_.commit(/*replace_existing=*/force_);
}

}  // namespace mxmoe::produce

namespace mxmoe {
namespace {

// The MoE-layers-only checkpoint of generate_checkpoint: its layers' specs and config.json,
// checked before anything is written.
struct LayersPlan {
  int layers = 1;
  LayerSpec spec, hash_spec;  // hash_spec: DeepSeek-V4's hash layers (the first hash_layers)
  int hash_layers = 0;
  std::string config;
  const LayerSpec& spec_of(int n) const { return n < hash_layers ? hash_spec : spec; }
};

LayersPlan plan_layers(const LayerSpec& spec, const GenerateOptions& options) {
  LayersPlan plan;
  plan.layers = options.layers == 0 ? 1 : options.layers;
  if (plan.layers < 1 || plan.layers > 4096)
    throw std::invalid_argument("generate: layers must be 1..4096, got " +
                                std::to_string(options.layers));
  const bool v4 = spec.family == Family::deepseek_v4;
  if (!v4 && options.hash_layers != 0)
    throw std::invalid_argument("generate: hash layers are DeepSeek-V4's (use its preset)");
  if (options.hash_layers < 0 || options.hash_layers > plan.layers)
    throw std::invalid_argument(
        fmt::format("generate: {} hash layers of {} layers", options.hash_layers, plan.layers));
  if (options.vocab < 0 || options.vocab > kMaxVocab)
    throw std::invalid_argument(fmt::format(
        "generate: vocab must be 0 (the default) or 1..{}, got {}", kMaxVocab, options.vocab));
  if (options.attention_heads != 0 || options.kv_heads != 0 || options.head_dim != 0 ||
      options.max_shard_bytes != 0)
    throw std::invalid_argument(
        "generate: attention sizes and the shard size are for the whole model (full)");
  plan.spec = plan.hash_spec = spec;
  plan.hash_layers = options.hash_layers;
  // DeepSeek-V4's hash layers: the routed spec's math with experts by token id.
  LayerSpec& hash_spec = plan.hash_spec;
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
  plan.config =
      model_config_json(spec, plan.layers, HashLayers{options.hash_layers, hash_spec.vocab});
  // The config must read back as the spec, or the checkpoint would not be what was asked.
  const ModelConfig reread = parse_model_config(plan.config, "generated config.json", spec.name);
  for (int n = 0; n < plan.layers; ++n)
    if (reread.spec_of(n) != plan.spec_of(n))
      throw std::invalid_argument(fmt::format(
          "generate: a {} config.json cannot express layer {} exactly (it reads back as {})",
          to_string(spec.family), n, to_json(reread.spec_of(n))));
  return plan;
}

std::uint64_t mxfp4_bytes(std::int64_t matrices, std::int64_t rows, std::int64_t cols) {
  return static_cast<std::uint64_t>(matrices * rows * (cols / 2 + cols / 32));
}

// The bytes gpt_oss_layer_tensors / deepseek_v4_layer_tensors write for a random layer of S
// (LayerStorage::random: f32 router and biases; DeepSeek-V4 converts its router to BF16 and
// writes the selection bias F32 or tid2eid I64).
std::uint64_t layer_bytes(const LayerSpec& s) {
  const std::int64_t e = s.num_experts, h = s.hidden, i = s.intermediate;
  const bool v4 = s.family == Family::deepseek_v4;
  std::uint64_t n = mxfp4_bytes(e, 2 * i, h) + mxfp4_bytes(e, h, i);
  n += static_cast<std::uint64_t>(e * h * (v4 ? 2 : 4));
  if (s.router_bias) n += static_cast<std::uint64_t>(4 * e);
  if (s.routing_params.selection_bias) n += static_cast<std::uint64_t>(4 * e);
  if (v4 && s.routing == RoutingMethod::hash)
    n += static_cast<std::uint64_t>(8 * s.vocab * s.top_k);
  if (s.expert_bias) n += static_cast<std::uint64_t>(4 * e * (2 * i + h));
  if (s.shared_experts > 0) {
    const std::int64_t is = s.shared_intermediate;
    if (s.shared_weight_format == ElementType::mxfp4) {
      n += mxfp4_bytes(1, 2 * is, h) + mxfp4_bytes(1, h, is);
    } else {  // FP8 E4M3 codes and their 128 x 128 block scales, per projection
      const auto blocks = [](std::int64_t v) { return (v + 127) / 128; };
      n += static_cast<std::uint64_t>(3 * is * h + 2 * blocks(is) * blocks(h) +
                                      blocks(h) * blocks(is));
    }
  }
  return n;
}

std::uint64_t plan_bytes(const LayersPlan& plan) {
  std::uint64_t n = 0;
  for (int layer = 0; layer < plan.layers; ++layer) n += layer_bytes(plan.spec_of(layer));
  return n;
}

}  // namespace

std::uint64_t generated_tensor_bytes(const LayerSpec& spec, const GenerateOptions& options) {
  if (options.full) return produce::full_checkpoint_bytes(spec, options);
  return plan_bytes(plan_layers(spec, options));
}

void generate_checkpoint(const std::string& out, const LayerSpec& spec,
                         const GenerateOptions& options) {
  if (options.full) {
    produce::write_full_checkpoint(out, spec, options);
    return;
  }
  using produce::deepseek_v4_layer_tensors;
  using produce::gpt_oss_layer_tensors;
  using produce::LayerTensors;
  const LayersPlan plan = plan_layers(spec, options);
  const bool v4 = spec.family == Family::deepseek_v4;
  produce::ProgressMeter meter("generate", plan_bytes(plan), {});  // for the per-layer lines only

  // One shard per layer (a layer at a time in memory), or one file for a single layer.
  produce::CheckpointDirectoryWriter writer(out, options.force);
  const std::function<void()> poll =
      produce::generate_poll(options.cancelled, out, writer.replaces_existing());
  writer.set_poll(poll);
  const model::GenerationPoll while_making_weights(poll);  // Ctrl-C within a layer too
  for (int n = 0; n < plan.layers; ++n) {
    const LayerSpec& s = plan.spec_of(n);
    const LayerStorage storage =
        LayerStorage::random(s, options.seed + static_cast<std::uint64_t>(n));
    const LayerTensors tensors = v4 ? deepseek_v4_layer_tensors(s, storage.weights(), n)
                                    : gpt_oss_layer_tensors(spec, storage.weights(), n);
    const std::string file = plan.layers == 1
                                 ? "model.safetensors"
                                 : produce::shard_file_name(static_cast<std::size_t>(n + 1),
                                                       static_cast<std::size_t>(plan.layers));
    writer.add_shard(file, tensors.tensors);
    for (const TensorToWrite& t : tensors.tensors) meter.add(t.data.size());
    if (options.progress)
      options.progress(fmt::format("generate: layer {}/{} -> {}; {}", n + 1, plan.layers, file,
                                   meter.fraction()));
  }
  writer.finish(plan.config, /*with_index=*/plan.layers > 1);
}

}  // namespace mxmoe
