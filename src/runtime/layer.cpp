// MoeLayer: route -> group slots by expert (counting sort) -> the backend kernel ->
// weighted combine in a fixed order (+ shared expert). See docs/MODELS.md for the math.
#include "mxmoe/layer.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/common/dense_expert.hpp"
#include "backends/expert_batch.hpp"
#include "backends/kernel.hpp"
#include "base/dot.hpp"
#include "base/thread_pool.hpp"
#include "base/workspace.hpp"
#include "model/dense_view.hpp"
#include "mxmoe/format.hpp"
#include "mxmoe/routing.hpp"
#include "routing/router_logits.hpp"

namespace mxmoe {
namespace {

// The shared experts as a one-expert layer every token is routed to (weight 1, no bias).
LayerSpec shared_expert_spec(const LayerSpec& s) {
  LayerSpec d;
  d.name = s.name + " (shared expert)";
  d.family = s.family;
  d.num_experts = 1;
  d.top_k = 1;
  d.hidden = s.hidden;
  d.intermediate = s.shared_intermediate;
  d.routing = RoutingMethod::topk_softmax;
  d.activation = s.activation;
  d.activation_params = s.activation_params;
  d.gate_up_layout = s.gate_up_layout;
  d.weight_format = s.weight_format;
  return d;
}

std::string join_reasons(const std::vector<Rejection>& reasons) {
  std::string out;
  for (const Rejection& r : reasons) out += (out.empty() ? "" : "; ") + r.detail;
  return out;
}

}  // namespace

struct MoeLayer::Impl {
  LayerWeights weights;
  Selection selection;
  Runtime* runtime = nullptr;
  ThreadPool* pool = nullptr;  // runtime->pool()
  std::unique_ptr<ExpertKernel> kernel, shared_kernel;
  std::vector<float> router_weight, router_bias, selection_bias;
  ExpertRange experts;       // the routed experts this layer holds
  bool adds_shared = false;  // the shared expert's output is added by EP rank 0 only
  Workspace workspace;

  const LayerSpec& spec() const { return selection.deployment.layer; }

  // Every buffer of one call, in one workspace.
  struct Buffers {
    float* logits;
    std::int32_t* ids;
    float* weights;
    std::int32_t* offsets;         // [local E + 1]
    std::int32_t* cursor;          // [local E]
    std::int32_t* order;           // [M * k]: local slots grouped by expert
    std::int32_t* slot_rows;       // [M * k]: slot s reads row s / k
    float* slot_out;               // [M * k, H]
    std::int32_t* shared_offsets;  // [2]
    std::int32_t* shared_order;    // [M]: identity (slot t is token t)
    float* shared_out;             // [M, H]
    float* routing_scratch;
    float* x_f32;  // forward_bf16 only
    float* y_f32;
    std::byte* kernel_ws;
    std::size_t kernel_ws_size;
  };

  Buffers carve(std::byte* base, std::int64_t tokens, bool bf16_io) const {
    const LayerSpec& s = spec();
    const auto m = static_cast<std::size_t>(tokens);
    const auto k = static_cast<std::size_t>(s.top_k);
    const auto e = static_cast<std::size_t>(experts.size());
    const auto h = static_cast<std::size_t>(s.hidden);
    const bool shared = shared_kernel != nullptr;
    Carver c(base);
    Buffers b{};
    b.logits = c.take<float>(m * static_cast<std::size_t>(s.num_experts));
    b.ids = c.take<std::int32_t>(m * k);
    b.weights = c.take<float>(m * k);
    b.offsets = c.take<std::int32_t>(e + 1);
    b.cursor = c.take<std::int32_t>(e);
    b.order = c.take<std::int32_t>(m * k);
    b.slot_rows = c.take<std::int32_t>(m * k);
    b.slot_out = c.take<float>(m * k * h);
    b.shared_offsets = c.take<std::int32_t>(2);
    b.shared_order = c.take<std::int32_t>(shared ? m : 0);
    b.shared_out = c.take<float>(shared ? m * h : 0);
    b.routing_scratch = c.take<float>(routing_scratch_floats(s));
    b.x_f32 = c.take<float>(bf16_io ? m * h : 0);
    b.y_f32 = c.take<float>(bf16_io ? m * h : 0);
    b.kernel_ws_size = kernel->workspace_bytes(tokens, tokens * s.top_k, pool->size());
    if (shared)
      b.kernel_ws_size =
          std::max(b.kernel_ws_size, shared_kernel->workspace_bytes(tokens, tokens, pool->size()));
    b.kernel_ws = c.take_bytes(b.kernel_ws_size);
    if (base == nullptr) b.kernel_ws_size = c.used();  // measuring: report the total
    return b;
  }

  std::int64_t max_tokens() const noexcept {
    return std::numeric_limits<std::int32_t>::max() / spec().top_k;
  }
  void check_tokens(const char* call, std::int64_t tokens) const {
    if (tokens < 0 || tokens > max_tokens())
      throw std::invalid_argument(std::string(call) + ": " + std::to_string(tokens) +
                                  " tokens; a call carries 0.." + std::to_string(max_tokens()) +
                                  " (tokens x top_k are numbered in 32 bits)");
  }

  Buffers buffers(std::int64_t tokens, bool bf16_io) {
    const std::size_t total = carve(nullptr, tokens, bf16_io).kernel_ws_size;
    return carve(workspace.reserve(total), tokens, bf16_io);
  }

  void router_logits(const float* x, std::int64_t tokens, float* logits) {
    const LayerSpec& s = spec();
    if (router_weight.empty())
      throw std::invalid_argument("layer '" + s.name +
                                  "' has no router weights: use forward_logits or forward_routed");
    // Over (token, block of experts): at decode the E dot products share the threads.
    compute_router_logits(router_weight.data(), router_bias.empty() ? nullptr : router_bias.data(),
                          x, tokens, s.num_experts, s.hidden, logits, pool);
  }

  // Everything after routing: group, compute, combine.
  void run_routed(const float* x, const std::int32_t* ids, const float* route_weights,
                  std::int64_t tokens, float* y, Buffers& b) {
    const LayerSpec& s = spec();
    const int k = s.top_k;
    const std::int64_t h = s.hidden;
    const std::int64_t slots = tokens * k;

    // This layer's slots grouped by local expert (slots of experts held elsewhere left out).
    const ExpertBatch batch =
        group_slots(ids, slots, k, experts, b.offsets, b.cursor, b.order, b.slot_rows);

    ExpertForward f;
    f.x = x;
    f.rows = tokens;
    f.batch = batch;
    f.slot_out = b.slot_out;
    f.pool = pool;
    f.workspace = b.kernel_ws;
    f.workspace_size = b.kernel_ws_size;
    kernel->run(f);

    if (adds_shared) {
      b.shared_offsets[0] = 0;
      b.shared_offsets[1] = static_cast<std::int32_t>(tokens);
      for (std::int64_t t = 0; t < tokens; ++t) b.shared_order[t] = static_cast<std::int32_t>(t);
      ExpertForward sf = f;
      // One slot per token, slot t reading row t: the identity serves as order and row map.
      sf.batch = {tokens, 1, b.shared_offsets, b.shared_order, b.shared_order};
      sf.slot_out = b.shared_out;
      shared_kernel->run(sf);
    }

    // y_t = sum_k w_tk * slot_out[t*k + k] over local experts, in slot order, then + shared.
    pool->parallel_for(tokens, [&](std::int64_t t, int) {
      float* yt = y + t * h;
      std::fill(yt, yt + h, 0.0f);
      for (int j = 0; j < k; ++j) {
        if (!experts.contains(ids[t * k + j])) continue;
        const float w = route_weights[t * k + j];
        const float* out = b.slot_out + (t * k + j) * h;
        for (std::int64_t i = 0; i < h; ++i) yt[i] += w * out[i];
      }
      if (adds_shared) {
        const float* out = b.shared_out + t * h;
        for (std::int64_t i = 0; i < h; ++i) yt[i] += out[i];
      }
    });
  }

  // token_ids: [tokens] for a hash layer (ignored by the other methods).
  void route_and_run(const float* x, const float* logits, const std::int32_t* token_ids,
                     std::int64_t tokens, float* y, Buffers& b) {
    const LayerSpec& s = spec();
    const std::span<float> scratch{b.routing_scratch, routing_scratch_floats(s)};
    if (s.routing == RoutingMethod::hash)
      route_hash(s, logits, weights.token_experts, token_ids, tokens, b.ids, b.weights, scratch);
    else
      route_logits(s, logits, selection_bias.empty() ? nullptr : selection_bias.data(), tokens,
                   b.ids, b.weights, scratch);
    run_routed(x, b.ids, b.weights, tokens, y, b);
  }

  // A hash layer routes by token id: the calls without ids refuse it before any work.
  void require_not_hash(const char* call) const {
    if (spec().routing == RoutingMethod::hash)
      throw std::invalid_argument(std::string(call) + ": layer '" + spec().name +
                                  "' is hash-routed (DeepSeek-V4 tid2eid): pass the tokens' ids");
  }
};

MoeLayer::MoeLayer(const LayerWeights& weights, Selection selection, Runtime& runtime)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (selection.chosen.empty()) throw NoBackendError(std::move(selection));
  const Deployment& d = selection.deployment;
  const LayerSpec& s = d.layer;
  validate(s, weights);
  if (!d.request.activation)
    throw std::invalid_argument(
        "selection.deployment.request.activation is unset (judge() resolves it)");
  const Backend* backend = find_backend(selection.chosen);
  if (backend == nullptr)
    throw std::invalid_argument("the selection chose '" + selection.chosen +
                                "', which is not a registered backend");
  if (const auto reasons = backend->check(d); !reasons.empty())
    throw std::invalid_argument("the selection chose '" + selection.chosen +
                                "' but its check rejects the deployment: " + join_reasons(reasons));

  m.weights = weights;
  m.runtime = &runtime;
  m.pool = &runtime.pool();
  const int rank = d.request.ep_rank;
  m.experts = contiguous_expert_range(s.num_experts, std::max(d.request.ep_size, 1), rank);
  // The kernel packs only the experts this layer holds: a slice, numbered from 0.
  Deployment kd = d;
  kd.layer.num_experts = m.experts.size();
  m.kernel = backend->create(kd, slice_experts(weights, m.experts));
  if (s.shared_experts > 0) {
    Deployment sd = d;
    sd.layer = shared_expert_spec(s);
    sd.request.ep_size = 1;
    sd.request.ep_rank = 0;
    if (s.shared_weight_format == WeightFormat::mxfp4) {
      LayerWeights sw;
      sw.w1 = weights.shared_w1;
      sw.w2 = weights.shared_w2;
      m.shared_kernel = backend->create(sd, sw);
    } else {
      // Not MXFP4 (DeepSeek-V4's FP8 shared expert): the one dense path every backend shares.
      m.shared_kernel =
          make_dense_expert_kernel(sd, weights.shared_dense_w1, weights.shared_dense_w2);
    }
    m.adds_shared = rank == 0;
  }
  m.router_weight = to_floats(weights.router_weight);
  m.router_bias = to_floats(weights.router_bias);
  m.selection_bias = to_floats(weights.selection_bias);
  m.selection = std::move(selection);
}

MoeLayer::~MoeLayer() = default;
MoeLayer::MoeLayer(MoeLayer&&) noexcept = default;
MoeLayer& MoeLayer::operator=(MoeLayer&&) noexcept = default;

void MoeLayer::forward(const float* x, std::int64_t tokens, float* y) {
  impl_->require_not_hash("forward");
  forward(x, nullptr, tokens, y);
}

void MoeLayer::forward(const float* x, const std::int32_t* token_ids, std::int64_t tokens,
                       float* y) {
  impl_->check_tokens("forward", tokens);
  if (tokens == 0) return;
  if (impl_->spec().routing == RoutingMethod::hash)
    validate_token_ids(impl_->spec(), token_ids, tokens);
  Impl::Buffers b = impl_->buffers(tokens, false);
  impl_->router_logits(x, tokens, b.logits);
  impl_->route_and_run(x, b.logits, token_ids, tokens, y, b);
}

void MoeLayer::forward_logits(const float* x, const float* logits, std::int64_t tokens, float* y) {
  impl_->check_tokens("forward_logits", tokens);
  impl_->require_not_hash("forward_logits");
  if (tokens == 0) return;
  Impl::Buffers b = impl_->buffers(tokens, false);
  impl_->route_and_run(x, logits, nullptr, tokens, y, b);
}

void MoeLayer::forward_routed(const float* x, const std::int32_t* ids, const float* weights,
                              std::int64_t tokens, float* y) {
  impl_->check_tokens("forward_routed", tokens);
  if (tokens == 0) return;
  validate_routing(impl_->spec(), ids, weights, tokens);
  Impl::Buffers b = impl_->buffers(tokens, false);
  impl_->run_routed(x, ids, weights, tokens, y, b);
}

void MoeLayer::forward_bf16(const std::uint16_t* x, std::int64_t tokens, std::uint16_t* y) {
  impl_->require_not_hash("forward_bf16");
  forward_bf16(x, nullptr, tokens, y);
}

void MoeLayer::forward_bf16(const std::uint16_t* x, const std::int32_t* token_ids,
                            std::int64_t tokens, std::uint16_t* y) {
  impl_->check_tokens("forward_bf16", tokens);
  if (tokens == 0) return;
  if (impl_->spec().routing == RoutingMethod::hash)
    validate_token_ids(impl_->spec(), token_ids, tokens);
  Impl::Buffers b = impl_->buffers(tokens, true);
  const std::int64_t n = tokens * impl_->spec().hidden;
  for (std::int64_t i = 0; i < n; ++i) b.x_f32[i] = bf16_to_f32(x[i]);
  impl_->router_logits(b.x_f32, tokens, b.logits);
  impl_->route_and_run(b.x_f32, b.logits, token_ids, tokens, b.y_f32, b);
  for (std::int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(b.y_f32[i]);
}

void MoeLayer::forward_routed_bf16(const std::uint16_t* x, const std::int32_t* ids,
                                   const float* weights, std::int64_t tokens, std::uint16_t* y) {
  impl_->check_tokens("forward_routed_bf16", tokens);
  if (tokens == 0) return;
  validate_routing(impl_->spec(), ids, weights, tokens);
  Impl::Buffers b = impl_->buffers(tokens, true);
  const std::int64_t n = tokens * impl_->spec().hidden;
  for (std::int64_t i = 0; i < n; ++i) b.x_f32[i] = bf16_to_f32(x[i]);
  impl_->run_routed(b.x_f32, ids, weights, tokens, b.y_f32, b);
  for (std::int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(b.y_f32[i]);
}

void MoeLayer::set_runtime(Runtime& runtime) noexcept {
  impl_->runtime = &runtime;
  impl_->pool = &runtime.pool();
}
int MoeLayer::threads() const noexcept {
  return impl_->pool->size();
}
Runtime& MoeLayer::runtime() const noexcept {
  return *impl_->runtime;
}
ExpertRange MoeLayer::experts() const noexcept {
  return impl_->experts;
}
const Selection& MoeLayer::selection() const noexcept {
  return impl_->selection;
}
const LayerSpec& MoeLayer::spec() const noexcept {
  return impl_->spec();
}
std::int64_t MoeLayer::max_tokens() const noexcept {
  return impl_->max_tokens();
}
std::size_t MoeLayer::workspace_bytes(std::int64_t tokens) const {
  impl_->check_tokens("workspace_bytes", tokens);
  return impl_->carve(nullptr, tokens, /*bf16_io=*/false).kernel_ws_size;
}
std::uint64_t MoeLayer::workspace_allocations() const noexcept {
  return impl_->workspace.growths();
}
std::size_t MoeLayer::packed_weight_bytes() const noexcept {
  return impl_->kernel->packed_bytes() +
         (impl_->shared_kernel ? impl_->shared_kernel->packed_bytes() : 0);
}

MoeLayer make_layer(const LayerSpec& spec, const LayerWeights& weights, const Hardware& hw,
                    const Request& request, Runtime& runtime) {
  const Deployment d{spec, hw, request};
  return MoeLayer(weights, select(d, preferences_for(spec.family)), runtime);
}

}  // namespace mxmoe
