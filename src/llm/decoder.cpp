// The decoder (decoder.hpp): binding a checkpoint's tensors and running steps.
#include "llm/decoder.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "backends/dense/dense_linear.hpp"
#include "base/file.hpp"
#include "base/thread_pool.hpp"
#include "io/tensor_set.hpp"
#include "llm/attention.hpp"
#include "mxmoe/errors.hpp"
#include "mxmoe/format.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/model.hpp"
#include "runtime/bind_linear.hpp"
#include "runtime/runtime_pool.hpp"

namespace mxmoe::llm {

namespace {

// A dense tensor of the checkpoint, checked against the shape the config implies.
struct DenseTensor {
  ElementType type = ElementType::f32;
  const void* data = nullptr;
  std::int64_t rows = 0, cols = 0;  // cols = 1 for a vector

  float at(std::int64_t i) const noexcept {
    return type == ElementType::bf16 ? bf16_to_f32(static_cast<const std::uint16_t*>(data)[i])
                                     : static_cast<const float*>(data)[i];
  }
};

double gb(std::uint64_t bytes) {
  return static_cast<double>(bytes) / 1e9;
}

// The step's buffers (Impl::h .. ids), allocated at construction for max_step_rows rows.
std::uint64_t step_buffer_bytes(const DecoderConfig& cfg, const DecoderOptions& opt, int threads) {
  const auto rows = static_cast<std::uint64_t>(opt.max_step_rows);
  const auto H = static_cast<std::uint64_t>(cfg.hidden);
  const std::uint64_t qd = static_cast<std::uint64_t>(cfg.heads) * static_cast<std::uint64_t>(cfg.head_dim);
  const std::uint64_t kvd = static_cast<std::uint64_t>(cfg.kv_heads) * static_cast<std::uint64_t>(cfg.head_dim);
  const auto I = static_cast<std::uint64_t>(cfg.dense_intermediate);
  const std::uint64_t floats = rows * (5 * H + 2 * qd + 2 * kvd + 2 * I) +
                               attention_scratch_floats(opt.max_context, cfg.heads / cfg.kv_heads) *
                                   static_cast<std::uint64_t>(threads + 1);
  return floats * sizeof(float) + rows * (sizeof(QueryRow) + sizeof(std::int32_t));
}

// How the dense matrices run: the mode, and the pool the compact copy is packed on.
struct DenseOptions {
  dense::DenseMode mode = dense::DenseMode::as_published;
  ThreadPool* pack_pool = nullptr;
};

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

class Binder {
 public:
  Binder(const io::TensorSet& tensors, std::string dir) : t_(tensors), dir_(std::move(dir)) {}

  const io::TensorRef* find(const std::string& name) const { return t_.find(name); }

  DenseTensor need(const std::string& name, std::vector<std::uint64_t> shape) const {
    const io::TensorRef* ref = t_.find(name);
    if (ref == nullptr)
      throw LoadError(fmt::format("{}: tensor '{}' is missing (config.json implies it, shape {})",
                                  dir_, name, shape_text(shape)));
    const std::optional<ElementType> type = element_type(ref->info->dtype);
    if (!type || (*type != ElementType::f32 && *type != ElementType::bf16))
      throw LoadError(fmt::format("{}: tensor '{}' is {}, expected BF16 or F32", dir_, name,
                                  to_string(ref->info->dtype)));
    if (ref->info->shape != shape)
      throw LoadError(fmt::format("{}: tensor '{}' has shape {}, config.json implies {}", dir_, name,
                                  shape_text(ref->info->shape), shape_text(shape)));
    DenseTensor d;
    d.type = *type;
    d.data = ref->data().data();
    d.rows = static_cast<std::int64_t>(shape[0]);
    d.cols = shape.size() > 1 ? static_cast<std::int64_t>(shape[1]) : 1;
    return d;
  }

  std::vector<float> vector(const std::string& name, std::int64_t n) const {
    const DenseTensor d = need(name, {static_cast<std::uint64_t>(n)});
    std::vector<float> out(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = d.at(i);
    for (std::int64_t i = 0; i < n; ++i)
      if (!std::isfinite(out[static_cast<std::size_t>(i)]))
        throw LoadError(fmt::format("{}: tensor '{}' holds a non-finite value at [{}]", dir_, name, i));
    return out;
  }

  dense::Linear linear(const std::string& name, std::int64_t out, std::int64_t in, bool bias,
                       const Hardware& hw, const DenseOptions& options) const {
    const DenseTensor w = need(name + ".weight", {static_cast<std::uint64_t>(out),
                                                  static_cast<std::uint64_t>(in)});
    dense::LinearWeights lw{.name = name + ".weight", .element = w.type, .data = w.data,
                            .out = out, .in = in};
    if (bias) {
      const DenseTensor b = need(name + ".bias", {static_cast<std::uint64_t>(out)});
      lw.bias = b.data;
      lw.bias_element = b.type;
    }
    try {
      dense::Linear linear = options.mode == dense::DenseMode::as_published_bf16
                                 ? bind_linear_bf16_where_fast(lw, hw)
                                 : bind_linear(lw, options.mode, hw, options.pack_pool);
      // The compact copy replaced the published matrix, which is not read again: its mapped
      // pages need not stay resident beside it (as a packed expert's, docs/CHECKPOINTS.md).
      // Not for a tied head: the embedding rows are still read through the mapping.
      if (dense::is_compact(options.mode) && name != "model.embed_tokens") {
        const io::TensorRef* ref = t_.find(name + ".weight");
        (void)ref->file->drop_resident(ref->data());
      }
      return linear;
    } catch (const std::invalid_argument& e) {
      throw LoadError(dir_ + ": " + e.what());
    }
  }

 private:
  const io::TensorSet& t_;
  std::string dir_;
};

struct Layer {
  std::vector<float> in_norm, post_norm, q_norm, k_norm, sinks;
  dense::Linear q, k, v, o;
  dense::Linear gate, up, down;  // a dense MLP layer
  MoeLayer* moe = nullptr;
  int window = 0;
};

// y = x / sqrt(mean(x^2) + eps) * w, the mean in double.
void rms_norm(const float* x, const float* w, std::int64_t n, double eps, float* y) noexcept {
  double ss = 0;
  for (std::int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const auto inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (std::int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * inv);
}

// A file the checkpoint may lack: "" when absent, else its text (a LoadError when it cannot be
// read or is not a regular file).
std::string read_optional(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  return files::read_regular_file<LoadError>(path);
}

}  // namespace

struct Decoder::Impl {
  DecoderConfig cfg;
  DecoderOptions opt;
  Hardware hw;
  Runtime* runtime = nullptr;
  std::string dir;
  io::TensorSet tensors;
  std::unique_ptr<Model> moe_model;
  std::vector<Layer> layers;
  DenseTensor embed;
  std::vector<float> final_norm;
  dense::Linear head;
  RopeTable rope;
  KvCache cache;
  std::vector<std::int32_t> lengths;
  // The step's buffers, sized for max_step_rows at construction.
  std::vector<float> h, xn, q, k, v, att, o, y, g, u, scratch, head_in;
  std::vector<QueryRow> qrows;
  std::vector<std::int32_t> ids;
  std::vector<std::int32_t> next_length;  // a step's lengths per slot before they are committed
  std::size_t scratch_stride = 0;
  dense::AttentionSelection attention;  // judged once, for cfg.head_dim on hw

  void bind(const std::string& directory);
  void run_layer(int l, std::int64_t m);
};

void Decoder::Impl::bind(const std::string& directory) {
  dir = directory;
  cfg = parse_decoder_config(files::read_regular_file<LoadError>(dir + "/config.json"),
                             dir + "/config.json");
  if (const std::string text = read_optional(dir + "/generation_config.json"); !text.empty())
    add_generation_config(cfg, text, dir + "/generation_config.json");
  const int H = cfg.hidden, hd = cfg.head_dim;
  const std::int64_t qd = std::int64_t{cfg.heads} * hd, kvd = std::int64_t{cfg.kv_heads} * hd;
  if (opt.max_context < 1 || opt.max_slots < 1 || opt.max_step_rows < 1)
    throw std::invalid_argument("decoder: max_context, max_slots and max_step_rows must be >= 1");
  if (opt.max_context > cfg.max_positions)
    throw std::invalid_argument(fmt::format(
        "a context of {} tokens exceeds the model's max_position_embeddings ({})", opt.max_context,
        cfg.max_positions));

  // Memory, before anything large is allocated or packed.
  tensors = io::TensorSet::open_dir(dir);
  std::uint64_t expert_bytes = 0, dense_elements = 0;
  for (const auto& [name, ref] : tensors.tensors()) {
    if (name.find(".experts.") != std::string::npos) {
      expert_bytes += ref.info->bytes();
    } else if (ref.info->shape.size() == 2) {
      dense_elements += ref.info->shape[0] * ref.info->shape[1];
    }
  }
  // The dense matrices' mode: compact as asked; otherwise as published, with bf16 activations
  // where the request names them and they are fast (bind_linear_bf16_where_fast), else f32.
  const dense::DenseMode mode =
      opt.compact == CompactFormat::int8   ? dense::DenseMode::compact_int8
      : opt.compact == CompactFormat::int4 ? dense::DenseMode::compact_int4
      : opt.request.activation == ActivationFormat::bf16 ? dense::DenseMode::as_published_bf16
                                                         : dense::DenseMode::as_published;
  // The compact copy: the packed groups' bytes per weight (dense::compact_group_block_bytes).
  const std::uint64_t compact_bytes =
      dense::is_compact(mode)
          ? dense_elements * static_cast<std::uint64_t>(dense::compact_group_block_bytes(mode)) /
                (dense::kCompactGroupRows * dense::kBlock)
          : 0;
  const std::uint64_t kv = KvCache::bytes_for(cfg.layers, opt.max_slots, opt.max_context,
                                              cfg.kv_heads, hd);
  const std::uint64_t step = step_buffer_bytes(cfg, opt, runtime->threads());
  const std::uint64_t needed = kv + expert_bytes + compact_bytes + step;
  const auto refuse = [&](std::uint64_t moe_workspaces) {
    throw std::runtime_error(fmt::format(
        "the model needs {:.2f} GB beside its mapping (KV cache {:.2f} GB for {} sequences x {} "
        "tokens, packed experts {:.2f} GB, compact matrices {:.2f} GB, step buffers {:.2f} GB "
        "and MoE workspaces {:.2f} GB for steps of {} rows), more than the {:.2f} GB available: "
        "lower --max-context, --max-batch or --prefill-chunk",
        gb(needed + moe_workspaces), gb(kv), opt.max_slots, opt.max_context, gb(expert_bytes),
        gb(compact_bytes), gb(step), gb(moe_workspaces), opt.max_step_rows,
        gb(opt.memory_limit)));
  };
  if (opt.memory_limit != 0 && needed > opt.memory_limit) refuse(0);

  const Binder b(tensors, dir);
  const DenseOptions lo{.mode = mode,
                        .pack_pool = &pool_of(*runtime)};
  embed = b.need("model.embed_tokens.weight",
                 {static_cast<std::uint64_t>(cfg.vocab), static_cast<std::uint64_t>(H)});
  final_norm = b.vector("model.norm.weight", H);
  if (cfg.tie_word_embeddings) {
    head = b.linear("model.embed_tokens", cfg.vocab, H, false, hw, lo);
  } else {
    head = b.linear("lm_head", cfg.vocab, H, false, hw, lo);
  }

  Request request = opt.request;
  moe_model = std::make_unique<Model>(dir, hw, *runtime, ModelOptions{.request = request});
  if (moe_model->num_layers() != cfg.layers)
    throw LoadError(fmt::format("{}: config.json has {} layers, the checkpoint {}", dir, cfg.layers,
                                moe_model->num_layers()));
  // Each MoE layer grows its own workspace at its first step of max_step_rows rows.
  if (opt.memory_limit != 0) {
    std::uint64_t workspaces = 0;
    for (int l = 0; l < cfg.layers; ++l)
      if (moe_model->skip_reason(l).empty())
        workspaces += moe_model->layer(l).workspace_bytes(opt.max_step_rows);
    if (needed + workspaces > opt.memory_limit) refuse(workspaces);
  }
  layers.resize(static_cast<std::size_t>(cfg.layers));
  for (int l = 0; l < cfg.layers; ++l) {
    Layer& L = layers[static_cast<std::size_t>(l)];
    const std::string p = fmt::format("model.layers.{}.", l);
    L.window = cfg.window[static_cast<std::size_t>(l)];
    L.in_norm = b.vector(p + "input_layernorm.weight", H);
    L.post_norm = b.vector(p + "post_attention_layernorm.weight", H);
    L.q = b.linear(p + "self_attn.q_proj", qd, H, cfg.attention_bias, hw, lo);
    L.k = b.linear(p + "self_attn.k_proj", kvd, H, cfg.attention_bias, hw, lo);
    L.v = b.linear(p + "self_attn.v_proj", kvd, H, cfg.attention_bias, hw, lo);
    L.o = b.linear(p + "self_attn.o_proj", H, qd, cfg.attention_bias, hw, lo);
    if (cfg.qk_norm) {
      L.q_norm = b.vector(p + "self_attn.q_norm.weight", hd);
      L.k_norm = b.vector(p + "self_attn.k_norm.weight", hd);
    }
    if (cfg.sinks) L.sinks = b.vector(p + "self_attn.sinks", cfg.heads);
    const bool moe = cfg.moe[static_cast<std::size_t>(l)];
    const std::string skip = moe_model->skip_reason(l);
    if (moe != skip.empty())
      throw LoadError(fmt::format("{}: layer {}: config.json makes it {}, the MoE reader says: {}",
                                  dir, l, moe ? "a MoE layer" : "a dense MLP layer",
                                  skip.empty() ? "a MoE layer" : skip));
    if (moe) {
      L.moe = &moe_model->layer(l);
    } else {
      const int I = cfg.dense_intermediate;
      L.gate = b.linear(p + "mlp.gate_proj", I, H, false, hw, lo);
      L.up = b.linear(p + "mlp.up_proj", I, H, false, hw, lo);
      L.down = b.linear(p + "mlp.down_proj", H, I, false, hw, lo);
    }
    if (opt.progress)
      opt.progress(fmt::format("loading: layer {}/{} ({})", l + 1, cfg.layers,
                               moe ? "MoE: " + std::string(L.moe->selection().chosen)
                                   : std::string("dense MLP")));
  }

  rope = RopeTable(cfg.rope, hd, opt.max_context);
  cache = KvCache(cfg.layers, opt.max_slots, opt.max_context, cfg.kv_heads, hd);
  lengths.assign(static_cast<std::size_t>(opt.max_slots), 0);
  next_length.assign(lengths.size(), 0);
  const auto rows = static_cast<std::size_t>(opt.max_step_rows);
  const std::size_t I = static_cast<std::size_t>(cfg.dense_intermediate);
  h.resize(rows * static_cast<std::size_t>(H));
  xn.resize(h.size());
  o.resize(h.size());
  y.resize(h.size());
  q.resize(rows * static_cast<std::size_t>(qd));
  att.resize(q.size());
  k.resize(rows * static_cast<std::size_t>(kvd));
  v.resize(k.size());
  g.resize(rows * I);
  u.resize(rows * I);
  head_in.resize(h.size());
  attention = dense::judge_attention_kernels(hd, hw);
  scratch_stride = attention_scratch_floats(opt.max_context, cfg.heads / cfg.kv_heads);
  scratch.resize(scratch_stride * static_cast<std::size_t>(runtime->threads() + 1));
  qrows.resize(rows);
  ids.resize(rows);
}

void Decoder::Impl::run_layer(int l, std::int64_t m) {
  Layer& L = layers[static_cast<std::size_t>(l)];
  ThreadPool& pool = pool_of(*runtime);
  const int H = cfg.hidden, hd = cfg.head_dim;
  const std::int64_t qd = std::int64_t{cfg.heads} * hd, kvd = std::int64_t{cfg.kv_heads} * hd;
  pool.parallel_for(m, [&](std::int64_t r, int) {
    rms_norm(h.data() + r * H, L.in_norm.data(), H, cfg.rms_eps, xn.data() + r * H);
  });
  {
    const std::array<const dense::Linear*, 3> qkv{&L.q, &L.k, &L.v};
    const std::array<float*, 3> out{q.data(), k.data(), v.data()};
    dense::Linear::forward_together(qkv, xn.data(), m, out, pool);
  }
  pool.parallel_for(m, [&](std::int64_t r, int) {
    float* qr = q.data() + r * qd;
    float* kr = k.data() + r * kvd;
    if (cfg.qk_norm) {
      for (int hh = 0; hh < cfg.heads; ++hh) rms_norm(qr + hh * hd, L.q_norm.data(), hd, cfg.rms_eps, qr + hh * hd);
      for (int hh = 0; hh < cfg.kv_heads; ++hh) rms_norm(kr + hh * hd, L.k_norm.data(), hd, cfg.rms_eps, kr + hh * hd);
    }
    const QueryRow row = qrows[static_cast<std::size_t>(r)];
    rope.apply(qr, cfg.heads, row.position);
    rope.apply(kr, cfg.kv_heads, row.position);
    std::memcpy(cache.key(l, row.slot, row.position), kr, static_cast<std::size_t>(kvd) * sizeof(float));
    std::memcpy(cache.value(l, row.slot, row.position), v.data() + r * kvd,
                static_cast<std::size_t>(kvd) * sizeof(float));
  });
  const AttentionShape shape{.heads = cfg.heads, .kv_heads = cfg.kv_heads, .head_dim = hd,
                             .window = L.window,
                             .sinks = L.sinks.empty() ? nullptr : L.sinks.data(),
                             .scale = 1.0f / std::sqrt(static_cast<float>(hd))};
  attend(shape, attention.kernels, cache, l, {qrows.data(), static_cast<std::size_t>(m)},
         q.data(), att.data(), scratch.data(), scratch_stride, pool);
  L.o.forward(att.data(), m, o.data(), pool);
  pool.parallel_for(m, [&](std::int64_t r, int) {
    float* hr = h.data() + r * H;
    const float* orow = o.data() + r * H;
    for (int i = 0; i < H; ++i) hr[i] += orow[i];
    rms_norm(hr, L.post_norm.data(), H, cfg.rms_eps, xn.data() + r * H);
  });
  if (L.moe != nullptr) {
    L.moe->forward({.tokens = m, .x = xn.data(), .y = y.data(), .token_ids = ids.data()});
  } else {
    const std::int64_t I = cfg.dense_intermediate;
    const std::array<const dense::Linear*, 2> gate_up{&L.gate, &L.up};
    const std::array<float*, 2> out{g.data(), u.data()};
    dense::Linear::forward_together(gate_up, xn.data(), m, out, pool);
    pool.parallel_for(m, [&](std::int64_t r, int) {
      float* gr = g.data() + r * I;
      const float* ur = u.data() + r * I;
      for (std::int64_t i = 0; i < I; ++i) gr[i] = gr[i] / (1.0f + std::exp(-gr[i])) * ur[i];
    });
    L.down.forward(g.data(), m, y.data(), pool);
  }
  pool.parallel_for(m, [&](std::int64_t r, int) {
    float* hr = h.data() + r * H;
    const float* yr = y.data() + r * H;
    for (int i = 0; i < H; ++i) hr[i] += yr[i];
  });
}

Decoder::Decoder(const std::string& dir, const Hardware& hardware, Runtime& runtime,
                 const DecoderOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->opt = options;
  impl_->hw = hardware;
  impl_->runtime = &runtime;
  impl_->bind(dir);
}

Decoder::~Decoder() = default;
Decoder::Decoder(Decoder&&) noexcept = default;
Decoder& Decoder::operator=(Decoder&&) noexcept = default;

const DecoderConfig& Decoder::config() const noexcept {
  return impl_->cfg;
}
const DecoderOptions& Decoder::options() const noexcept {
  return impl_->opt;
}

std::int32_t Decoder::length(int slot) const {
  if (slot < 0 || slot >= impl_->opt.max_slots)
    throw std::invalid_argument(fmt::format("sequence slot {} is outside [0, {})", slot, impl_->opt.max_slots));
  return impl_->lengths[static_cast<std::size_t>(slot)];
}

void Decoder::reset(int slot) {
  (void)length(slot);
  impl_->lengths[static_cast<std::size_t>(slot)] = 0;
}

void Decoder::step(std::span<const StepRow> rows, float* logits) {
  Impl& d = *impl_;
  const auto m = static_cast<std::int64_t>(rows.size());
  if (m == 0) return;
  if (m > d.opt.max_step_rows)
    throw std::invalid_argument(fmt::format("a step of {} rows exceeds max_step_rows ({})", m, d.opt.max_step_rows));
  // Every check before any work: the cache and lengths are untouched by a refused step.
  std::vector<std::int32_t>& next = d.lengths;  // positions are assigned below, committed at the end
  std::int64_t logit_rows = 0;
  for (std::int64_t r = 0; r < m; ++r) {
    const StepRow& row = rows[static_cast<std::size_t>(r)];
    if (row.token < 0 || row.token >= d.cfg.vocab)
      throw std::invalid_argument(fmt::format("token id {} (row {}) is outside the vocabulary [0, {})",
                                              row.token, r, d.cfg.vocab));
    if (row.slot < 0 || row.slot >= d.opt.max_slots)
      throw std::invalid_argument(fmt::format("sequence slot {} (row {}) is outside [0, {})", row.slot, r,
                                              d.opt.max_slots));
    logit_rows += row.logits ? 1 : 0;
  }
  std::vector<std::int32_t>& position = d.next_length;  // preallocated: a step allocates nothing
  position = next;
  for (std::int64_t r = 0; r < m; ++r) {
    const StepRow& row = rows[static_cast<std::size_t>(r)];
    std::int32_t& p = position[static_cast<std::size_t>(row.slot)];
    if (p >= d.opt.max_context)
      throw std::invalid_argument(fmt::format(
          "sequence {} would exceed its context of {} tokens (--max-context)", row.slot, d.opt.max_context));
    d.qrows[static_cast<std::size_t>(r)] = {row.slot, p};
    d.ids[static_cast<std::size_t>(r)] = row.token;
    ++p;
  }
  const int H = d.cfg.hidden;
  for (std::int64_t r = 0; r < m; ++r) {
    const std::int64_t base = std::int64_t{rows[static_cast<std::size_t>(r)].token} * H;
    for (int i = 0; i < H; ++i) d.h[static_cast<std::size_t>(r * H + i)] = d.embed.at(base + i);
  }
  // The pool skips the tasks of a job once the runtime's interrupt check says so (Ctrl-C in
  // Python): the step is then abandoned whole, its positions not committed.
  ThreadPool& pool = pool_of(*d.runtime);
  for (int l = 0; l < d.cfg.layers; ++l) {
    d.run_layer(l, m);
    if (pool.interrupt_requested()) throw Interrupted();
  }
  std::int64_t n = 0;
  for (std::int64_t r = 0; r < m; ++r)
    if (rows[static_cast<std::size_t>(r)].logits) {
      rms_norm(d.h.data() + r * H, d.final_norm.data(), H, d.cfg.rms_eps, d.head_in.data() + n * H);
      ++n;
    }
  if (logit_rows > 0) d.head.forward(d.head_in.data(), logit_rows, logits, pool);
  if (pool.interrupt_requested()) throw Interrupted();
  next = position;
}

std::string Decoder::describe() const {
  const Impl& d = *impl_;
  std::string s = fmt::format("{}: {} layers, hidden {}, {} heads ({} kv) of {}, vocab {}\n",
                              to_string(d.cfg.family), d.cfg.layers, d.cfg.hidden, d.cfg.heads,
                              d.cfg.kv_heads, d.cfg.head_dim, d.cfg.vocab);
  s += fmt::format("  dense layers (attention, head): {} ({})\n", d.head.kernel_name(),
                   dense::to_string(d.head.mode()));
  s += dense::describe(d.head.selection(), "lm_head");
  s += dense::describe(d.attention);
  for (int l = 0; l < d.cfg.layers; ++l) {
    const Layer& L = d.layers[static_cast<std::size_t>(l)];
    if (L.moe) {
      s += fmt::format("  layer {}: MoE on {}{}\n", l, L.moe->selection().chosen,
                       L.window ? fmt::format(", sliding window {}", L.window) : "");
    } else {
      s += fmt::format("  layer {}: dense MLP{}\n", l,
                       L.window ? fmt::format(", sliding window {}", L.window) : "");
    }
  }
  return s;
}

std::uint64_t Decoder::bytes_per_token() const {
  const Impl& d = *impl_;
  std::uint64_t bytes = d.head.weight_bytes();
  for (const Layer& L : d.layers) {
    bytes += L.q.weight_bytes() + L.k.weight_bytes() + L.v.weight_bytes() + L.o.weight_bytes();
    if (L.moe) {
      const LayerSpec& s = L.moe->spec();
      const auto hidden = static_cast<std::uint64_t>(s.hidden);
      // MXFP4: 4 bits a weight and one E8M0 scale a 32-block, 4.25 bits.
      const std::uint64_t per_expert = 3 * hidden * static_cast<std::uint64_t>(s.intermediate) * 17 / 32;
      bytes += per_expert * static_cast<std::uint64_t>(s.top_k) +
               static_cast<std::uint64_t>(s.num_experts) * hidden * 2;
    } else {
      bytes += L.gate.weight_bytes() + L.up.weight_bytes() + L.down.weight_bytes();
    }
  }
  return bytes;
}

std::uint64_t Decoder::kv_cache_bytes() const {
  return impl_->cache.bytes();
}

}  // namespace mxmoe::llm
