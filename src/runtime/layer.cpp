// MoeLayer: route -> group slots by expert (counting sort) -> the backend kernel ->
// weighted combine in a fixed order (+ shared expert). See docs/MODELS.md for the math.
#include "mxmoe/layer.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/common/dense_expert.hpp"
#include "backends/expert_batch.hpp"
#include "backends/kernel.hpp"
#include "backends/registry.hpp"
#include "base/dot.hpp"
#include "base/mapped_reads.hpp"
#include "base/thread_pool.hpp"
#include "base/workspace.hpp"
#include "model/dense_view.hpp"
#include "model/mapped_weights.hpp"
#include "mxmoe/edge_checks.hpp"
#include "mxmoe/format.hpp"
#include "routing/router_logits.hpp"
#include "routing/routing.hpp"
#include "runtime/layer_steps.hpp"
#include "runtime/runtime_pool.hpp"
#include "runtime/weight_bytes.hpp"

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

// forward()'s combine, the one piece of arithmetic that decides the output bits after the
// per-slot outputs: y_t = sum over j = 0..k-1, in that order, of w_tj * out_tj, then + shared.
// An expert-parallel group runs exactly this on the token's own rank (MoeLayer::Steps::combine).
void combine_slots(ThreadPool& pool, const float* route_weights, const float* slot_out,
                   const float* shared_out, int k, std::int64_t h, std::int64_t tokens, float* y) {
  pool.parallel_for(tokens, [&](std::int64_t t, int) {
    float* yt = y + t * h;
    std::fill(yt, yt + h, 0.0f);
    for (int j = 0; j < k; ++j) {
      const float w = route_weights[t * k + j];
      const float* out = slot_out + (t * k + j) * h;
      for (std::int64_t i = 0; i < h; ++i) yt[i] += w * out[i];
    }
    if (shared_out != nullptr) {
      const float* out = shared_out + t * h;
      for (std::int64_t i = 0; i < h; ++i) yt[i] += out[i];
    }
  });
}

struct MoeLayer::Impl {
  // A kernel per run of consecutive experts this layer holds (one run, [0, E), without
  // expert parallelism; one per contiguous range with the default placement).
  struct Part {
    ExpertRange experts;
    std::unique_ptr<ExpertKernel> kernel;
  };

  LayerWeights weights;
  Selection selection;
  Runtime* runtime = nullptr;
  ThreadPool* pool = nullptr;  // pool_of(*runtime)
  std::vector<Part> parts;
  std::unique_ptr<ExpertKernel> shared_kernel;
  std::vector<float> router_weight, router_bias, selection_bias;
  Placement placement;
  int rank = 0;
  int held = 0;        // experts this layer holds
  int widest_run = 0;  // experts of its largest part
  Workspace workspace;

  // The guarded mappings the layer's views lie in while it reads them (empty: it does not).
  std::vector<int> sources;
  // The views' bytes computing reads at every call (weight_bytes_read()).
  std::vector<ArrayBytes> read_in_place;

  const LayerSpec& spec() const { return selection.deployment.layer; }

  // F() with the guard of base/mapped_reads.hpp when computing reads mapped views.
  template <class F>
  void reading(F&& f) {
    if (sources.empty())
      f();
    else
      mapped_reads::read_guarded(sources, f);
  }
  bool holds_all() const { return held == spec().num_experts; }

  // Scratch of one compute(): the grouping of slots by expert and the kernels' workspace.
  struct Compute {
    std::int32_t* offsets;  // [widest run + 1]
    std::int32_t* cursor;   // [widest run]
    std::int32_t* order;    // [slots]
    std::byte* kernel_ws;
    std::size_t kernel_ws_size;
  };

  // Every buffer of one forward call, in one workspace.
  struct Buffers {
    float* logits;
    std::int32_t* ids;
    float* weights;
    std::int32_t* slot_rows;       // [M * k]: slot s reads row s / k
    float* slot_out;               // [M * k, H]
    std::int32_t* shared_offsets;  // [2]
    std::int32_t* shared_order;    // [M]: identity (slot t is token t)
    float* shared_out;             // [M, H]
    float* routing_scratch;
    float* x_f32;  // bf16 calls only
    float* y_f32;
    Compute compute;
  };

  std::size_t kernel_workspace_bytes(std::int64_t rows, std::int64_t slots) const {
    std::size_t bytes = 0;
    for (const Part& p : parts)
      bytes = std::max(bytes, p.kernel->workspace_bytes(rows, slots, pool->size()));
    if (shared_kernel)
      bytes = std::max(bytes, shared_kernel->workspace_bytes(rows, rows, pool->size()));
    return bytes;
  }

  Compute carve_compute(Carver& c, std::int64_t rows, std::int64_t slots) const {
    Compute b{};
    const auto n = static_cast<std::size_t>(widest_run);
    b.offsets = c.take<std::int32_t>(n + 1);
    b.cursor = c.take<std::int32_t>(n);
    b.order = c.take<std::int32_t>(static_cast<std::size_t>(slots));
    b.kernel_ws_size = kernel_workspace_bytes(rows, slots);
    b.kernel_ws = c.take_bytes(b.kernel_ws_size);
    return b;
  }

  Buffers carve(std::byte* base, std::int64_t tokens, bool bf16_io, std::size_t& used) const {
    const LayerSpec& s = spec();
    const auto m = static_cast<std::size_t>(tokens);
    const auto k = static_cast<std::size_t>(s.top_k);
    const auto h = static_cast<std::size_t>(s.hidden);
    const bool shared = shared_kernel != nullptr;
    Carver c(base);
    Buffers b{};
    b.logits = c.take<float>(m * static_cast<std::size_t>(s.num_experts));
    b.ids = c.take<std::int32_t>(m * k);
    b.weights = c.take<float>(m * k);
    b.slot_rows = c.take<std::int32_t>(m * k);
    b.slot_out = c.take<float>(m * k * h);
    b.shared_offsets = c.take<std::int32_t>(2);
    b.shared_order = c.take<std::int32_t>(shared ? m : 0);
    b.shared_out = c.take<float>(shared ? m * h : 0);
    b.routing_scratch = c.take<float>(routing_scratch_floats(s));
    b.x_f32 = c.take<float>(bf16_io ? m * h : 0);
    b.y_f32 = c.take<float>(bf16_io ? m * h : 0);
    b.compute = carve_compute(c, tokens, tokens * s.top_k);
    used = c.used();
    return b;
  }

  std::int64_t max_tokens() const noexcept {
    return std::numeric_limits<std::int32_t>::max() / spec().top_k;
  }
  void check_tokens(const char* call, std::int64_t tokens) const {
    require_call_tokens(call, tokens, spec().top_k);
  }

  Buffers buffers(std::int64_t tokens, bool bf16_io) {
    std::size_t total = 0;
    carve(nullptr, tokens, bf16_io, total);
    return carve(workspace.reserve(total), tokens, bf16_io, total);
  }

  // The checks every forward form makes first, in one place: the layer holds every expert,
  // TOKENS is within the call bound, X [tokens, hidden] is finite. False for 0 tokens (nothing
  // to do).
  template <class T>
  bool begin_forward(const char* call, const T* x, std::int64_t tokens) const {
    require_all_experts(call);
    check_tokens(call, tokens);
    if (tokens == 0) return false;
    start_call();
    require_finite_input("x", x, tokens, spec().hidden);
    return true;
  }

  void require_output_outside_weights(const ArrayBytes& y) const {
    require_disjoint(read_in_place, {&y, 1});
  }

  void require_all_experts(const char* call) const {
    if (holds_all()) return;
    throw std::invalid_argument(fmt::format(
        "{}: layer '{}' holds {} of its {} experts (expert-parallel rank {} of {}): run it "
        "through mxmoe::ExpertParallelLayer (mxmoe/expert_parallel.hpp), which dispatches "
        "tokens to every expert's rank",
        call, spec().name, held, spec().num_experts, rank, placement.ranks()));
  }

  void router_logits(const float* x, std::int64_t tokens, float* logits) {
    const LayerSpec& s = spec();
    if (router_weight.empty())
      throw std::invalid_argument(
          "layer '" + s.name +
          "' has no router weights: pass the routing (router_logits, or expert_ids with "
          "expert_weights; use forward_routed in Python and C)");
    // Over (token, block of experts): at decode the E dot products share the threads.
    compute_router_logits(router_weight.data(), router_bias.empty() ? nullptr : router_bias.data(),
                          x, tokens, s.num_experts, s.hidden, logits, pool);
  }

  // ids/w [tokens, k] from the router's logits (a hash layer: from token_ids [tokens]).
  void route_from(const float* logits, const std::int32_t* token_ids, std::int64_t tokens,
                  Buffers& b, std::int32_t* ids, float* w) {
    const LayerSpec& s = spec();
    const std::span<float> scratch{b.routing_scratch, routing_scratch_floats(s)};
    if (s.routing == RoutingMethod::hash)
      route_hash(s, logits, weights.token_experts, token_ids, tokens, ids, w, scratch);
    else
      route_logits(s, logits, selection_bias.empty() ? nullptr : selection_bias.data(), tokens, ids,
                   w, scratch);
  }

  // The unweighted output of every slot of a held expert: slot s applies ids[s] to
  // x[slot_rows[s]]; one kernel call per part, each over the slots of its experts.
  void compute(const float* x, std::int64_t rows, const std::int32_t* ids,
               const std::int32_t* slot_rows, std::int64_t slots, float* slot_out,
               const Compute& b) {
    for (const Part& p : parts) {
      const ExpertBatch batch =
          group_dispatched_slots(ids, slot_rows, slots, p.experts, b.offsets, b.cursor, b.order);
      if (batch.expert_offsets[batch.num_experts] == 0) continue;  // no slot for this part
      ExpertForward f;
      f.x = x;
      f.rows = rows;
      f.batch = batch;
      f.slot_out = slot_out;
      f.pool = pool;
      f.workspace = b.kernel_ws;
      f.workspace_size = b.kernel_ws_size;
      p.kernel->run(f);
    }
  }

  // The shared expert on every token: one slot per token, slot t reading row t (the identity
  // serves as order and row map).
  void shared(const float* x, std::int64_t tokens, float* out, std::int32_t* offsets,
              std::int32_t* identity, const Compute& b) {
    offsets[0] = 0;
    offsets[1] = static_cast<std::int32_t>(tokens);
    for (std::int64_t t = 0; t < tokens; ++t) identity[t] = static_cast<std::int32_t>(t);
    ExpertForward f;
    f.x = x;
    f.rows = tokens;
    f.batch = {tokens, 1, offsets, identity, identity};
    f.slot_out = out;
    f.pool = pool;
    f.workspace = b.kernel_ws;
    f.workspace_size = b.kernel_ws_size;
    shared_kernel->run(f);
  }

  // When the running call (or expert-parallel step) began: see stop_if_interrupted.
  mutable std::chrono::steady_clock::time_point call_start;
  void start_call() const { call_start = std::chrono::steady_clock::now(); }

  // Between the steps of a call: the runtime's interrupt check (Runtime::set_interrupt_check)
  // asked to stop, so a step of the pool may have skipped work: nothing it left is read. The
  // pool polls a job's check no sooner than ThreadPool::kInterruptPoll after the job began, so
  // a call younger than that was never cut short, and the check (Python's takes the GIL) is not
  // asked: a decode call never pays for it.
  void stop_if_interrupted() const {
    if (std::chrono::steady_clock::now() - call_start < ThreadPool::kInterruptPoll) return;
    if (pool->interrupt_requested()) throw Interrupted();
  }

  // Everything after routing: group, compute, combine.
  void run_routed(const float* x, const std::int32_t* ids, const float* route_weights,
                  std::int64_t tokens, float* y, Buffers& b) {
    stop_if_interrupted();
    const LayerSpec& s = spec();
    const std::int64_t slots = tokens * s.top_k;
    for (std::int64_t i = 0; i < slots; ++i)
      b.slot_rows[i] = static_cast<std::int32_t>(i / s.top_k);
    compute(x, tokens, ids, b.slot_rows, slots, b.slot_out, b.compute);
    if (shared_kernel) shared(x, tokens, b.shared_out, b.shared_offsets, b.shared_order, b.compute);
    stop_if_interrupted();
    combine_slots(*pool, route_weights, b.slot_out, shared_kernel ? b.shared_out : nullptr, s.top_k,
                  s.hidden, tokens, y);
    stop_if_interrupted();
  }

  // token_ids: [tokens] for a hash layer (ignored by the other methods).
  void route_and_run(const float* x, const float* logits, const std::int32_t* token_ids,
                     std::int64_t tokens, float* y, Buffers& b) {
    stop_if_interrupted();  // the router's logits are whole
    route_from(logits, token_ids, tokens, b, b.ids, b.weights);
    run_routed(x, b.ids, b.weights, tokens, y, b);
  }

  // A hash layer routes by token id: a call without ids (or with logits) is refused before
  // any work.
  void require_not_hash(const char* call) const {
    if (spec().routing == RoutingMethod::hash)
      throw std::invalid_argument(std::string(call) + ": layer '" + spec().name +
                                  "' is hash-routed (DeepSeek-V4 tid2eid): pass the tokens' ids");
  }

  // What a forward call computes, from the fields its ForwardArgs sets.
  enum class Routing { router, logits, given };
  struct Form {
    Routing routing;
    bool bf16;
    const char* call;  // the name the checks of this form say (as the hosts name the form)
  };

  // The one check of a call's combination of fields (ForwardArgs): throws
  // std::invalid_argument naming the fields for a combination forward() does not compute.
  Form form_of(const ForwardArgs& a) const {
    const auto refuse = [](const char* what) {
      throw std::invalid_argument(std::string("forward: ") + what);
    };
    if (a.x != nullptr && a.x_bf16 != nullptr) refuse("x and x_bf16 are both set: pass one input");
    if (a.y != nullptr && a.y_bf16 != nullptr) refuse("y and y_bf16 are both set: pass one output");
    if (a.x != nullptr && a.y_bf16 != nullptr)
      refuse("x is float32 and y_bf16 bf16: pass x with y, or x_bf16 with y_bf16");
    if (a.x_bf16 != nullptr && a.y != nullptr)
      refuse("x_bf16 is bf16 and y float32: pass x with y, or x_bf16 with y_bf16");
    if (a.tokens > 0 && a.x == nullptr && a.x_bf16 == nullptr)
      refuse("x and x_bf16 are both null: pass the input");
    if (a.tokens > 0 && a.y == nullptr && a.y_bf16 == nullptr)
      refuse("y and y_bf16 are both null: pass the output");
    if ((a.expert_ids == nullptr) != (a.expert_weights == nullptr))
      refuse(a.expert_ids != nullptr ? "expert_ids without expert_weights: pass both"
                                     : "expert_weights without expert_ids: pass both");
    const bool given = a.expert_ids != nullptr;
    if (given && a.router_logits != nullptr)
      refuse("router_logits and expert_ids/expert_weights are both set: pass one routing");
    if (a.token_ids != nullptr && (given || a.router_logits != nullptr))
      refuse(given ? "token_ids with expert_ids: the ids route by the router, which the given "
                     "routing replaces; pass one"
                   : "token_ids with router_logits: the ids route by the router, which the "
                     "logits replace; pass one");
    const bool bf16 = a.x_bf16 != nullptr || a.y_bf16 != nullptr;
    const Routing routing = given                        ? Routing::given
                            : a.router_logits != nullptr ? Routing::logits
                                                         : Routing::router;
    static constexpr const char* kCalls[3][2] = {{"forward", "forward_bf16"},
                                                 {"forward_logits", "forward_logits_bf16"},
                                                 {"forward_routed", "forward_routed_bf16"}};
    const Form f{routing, bf16, kCalls[static_cast<int>(routing)][bf16 ? 1 : 0]};
    if (routing == Routing::logits ||
        (routing == Routing::router && a.token_ids == nullptr && a.tokens != 0))
      require_not_hash(f.call);
    return f;
  }

  // forward() of a combination form_of() accepted: the checks of every call (begin_forward),
  // those of the routing given, then route (or not), compute, combine; bf16 through float32.
  void forward(const ForwardArgs& a, const Form& f) {
    const std::int64_t tokens = a.tokens;
    if (!(f.bf16 ? begin_forward(f.call, a.x_bf16, tokens) : begin_forward(f.call, a.x, tokens)))
      return;
    const std::size_t y_bytes = static_cast<std::size_t>(tokens * spec().hidden) * (f.bf16 ? 2 : 4);
    require_output_outside_weights(
        dense_bytes("y", f.bf16 ? static_cast<const void*>(a.y_bf16) : a.y, y_bytes));
    if (f.routing == Routing::given)
      validate_routing(spec(), a.expert_ids, a.expert_weights, tokens);
    else if (f.routing == Routing::router && spec().routing == RoutingMethod::hash)
      validate_token_ids(spec(), a.token_ids, tokens);
    Buffers b = buffers(tokens, f.bf16);
    const std::int64_t n = tokens * spec().hidden;
    const float* x = a.x;
    float* y = a.y;
    if (f.bf16) {
      for (std::int64_t i = 0; i < n; ++i) b.x_f32[i] = bf16_to_f32(a.x_bf16[i]);
      x = b.x_f32;
      y = b.y_f32;
    }
    switch (f.routing) {
      case Routing::router:
        router_logits(x, tokens, b.logits);
        route_and_run(x, b.logits, a.token_ids, tokens, y, b);
        break;
      case Routing::logits:
        route_and_run(x, a.router_logits, nullptr, tokens, y, b);
        break;
      case Routing::given:
        run_routed(x, a.expert_ids, a.expert_weights, tokens, y, b);
        break;
    }
    if (f.bf16)
      for (std::int64_t i = 0; i < n; ++i) a.y_bf16[i] = f32_to_bf16(b.y_f32[i]);
  }
};

MoeLayer::MoeLayer(const LayerWeights& weights, Selection selection, Runtime& runtime)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (selection.chosen.empty()) throw NoBackendError(std::move(selection));
  const Deployment& d = selection.deployment;
  const LayerSpec& s = d.layer;
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
  m.pool = &pool_of(runtime);
  m.placement = placement_of(d.request, s.num_experts);
  m.rank = d.request.ep_rank;
  // The bytes may be a checkpoint's mapping: a file truncated under it is a LoadError naming
  // the file, not a bus error (base/mapped_reads.hpp).
  m.sources = mapped_sources(weights);
  mapped_reads::read_guarded(m.sources, [&] {
    // Shapes of everything, values (NaN scales) of the experts this rank reads only: a rank
    // never touches the pages of experts it does not hold (docs/DISTRIBUTED.md, memory).
    const std::vector<ExpertRange> runs = m.placement.runs(m.rank);
    validate(s, weights, runs);
    // Each kernel packs only its run of experts: a slice, numbered from 0.
    for (const ExpertRange& run : runs) {
      Deployment kd = d;
      kd.layer.num_experts = run.size();
      m.parts.push_back({run, backend->create(kd, slice_experts(weights, run))});
      m.held += run.size();
      m.widest_run = std::max(m.widest_run, run.size());
    }
    if (s.shared_experts > 0) {
      Deployment sd = d;
      sd.layer = shared_expert_spec(s);
      sd.request.ep_size = 1;
      sd.request.ep_rank = 0;
      sd.request.placement.clear();
      if (s.shared_weight_format == ElementType::mxfp4) {
        LayerWeights sw;
        sw.w1 = weights.shared_w1;
        sw.w2 = weights.shared_w2;
        m.shared_kernel = backend->create(sd, sw);
      } else {
        // Not MXFP4 (DeepSeek-V4's FP8 shared expert): the one dense path every backend shares.
        m.shared_kernel =
            make_dense_expert_kernel(sd, weights.shared_dense_w1, weights.shared_dense_w2);
      }
    }
    m.router_weight = to_floats(weights.router_weight);
    m.router_bias = to_floats(weights.router_bias);
    m.selection_bias = to_floats(weights.selection_bias);
  });
  if (!reads_weight_views()) m.sources.clear();  // computing never reads them again
  const auto in_place = [](const ExpertKernel* k) {
    return k != nullptr && k->packed_bytes() == 0;
  };
  const bool experts_in_place =
      std::any_of(m.parts.begin(), m.parts.end(),
                  [&](const Impl::Part& p) { return in_place(p.kernel.get()); });
  m.read_in_place = weight_bytes(weights, experts_in_place, in_place(m.shared_kernel.get()),
                                 s.routing == RoutingMethod::hash);
  m.selection = std::move(selection);
}

MoeLayer::~MoeLayer() = default;
MoeLayer::MoeLayer(MoeLayer&&) noexcept = default;
MoeLayer& MoeLayer::operator=(MoeLayer&&) noexcept = default;

void MoeLayer::forward(const ForwardArgs& args) {
  const Impl::Form form = impl_->form_of(args);
  impl_->reading([&] { impl_->forward(args, form); });
}

void MoeLayer::Steps::route(MoeLayer& layer, const float* x, const std::int32_t* token_ids,
                            std::int64_t tokens, std::int32_t* ids, float* weights) {
  MoeLayer::Impl& m = *layer.impl_;
  m.reading([&] {
    m.check_tokens("route", tokens);
    if (tokens == 0) return;
    require_finite_input("x", x, tokens, m.spec().hidden);
    if (m.spec().routing == RoutingMethod::hash) validate_token_ids(m.spec(), token_ids, tokens);
    m.start_call();
    MoeLayer::Impl::Buffers b = m.buffers(tokens, false);
    m.router_logits(x, tokens, b.logits);
    m.stop_if_interrupted();  // the logits are whole
    m.route_from(b.logits, token_ids, tokens, b, ids, weights);
  });
}

void MoeLayer::Steps::compute_slots(MoeLayer& layer, const float* rows, std::int64_t num_rows,
                                    const std::int32_t* ids, const std::int32_t* slot_rows,
                                    std::int64_t slots, float* out) {
  MoeLayer::Impl& m = *layer.impl_;
  m.reading([&] {
    if (num_rows < 0 || slots < 0 || num_rows > std::numeric_limits<std::int32_t>::max() ||
        slots > std::numeric_limits<std::int32_t>::max())
      throw std::invalid_argument(fmt::format(
          "compute_slots: {} rows and {} slots (each must be in [0, 2^31))", num_rows, slots));
    for (std::int64_t s = 0; s < slots; ++s) {
      const std::int32_t e = ids[s];
      if (e < 0 || e >= m.spec().num_experts || m.placement.owner(e) != m.rank)
        throw std::invalid_argument(fmt::format(
            "compute_slots: slot {} names expert {}, which rank {} does not hold", s, e, m.rank));
      if (slot_rows[s] < 0 || slot_rows[s] >= num_rows)
        throw std::invalid_argument(
            fmt::format("compute_slots: slot {} reads row {} of {}", s, slot_rows[s], num_rows));
    }
    if (slots == 0) return;
    m.start_call();
    Carver measure(nullptr);
    m.carve_compute(measure, num_rows, slots);
    Carver c(m.workspace.reserve(measure.used()));
    m.compute(rows, num_rows, ids, slot_rows, slots, out, m.carve_compute(c, num_rows, slots));
    m.stop_if_interrupted();
  });
}

bool MoeLayer::Steps::shared_expert(MoeLayer& layer, const float* x, std::int64_t tokens,
                                    float* out) {
  MoeLayer::Impl& m = *layer.impl_;
  if (!m.shared_kernel) return false;
  m.check_tokens("shared_expert", tokens);
  if (tokens == 0) return true;
  const auto t = static_cast<std::size_t>(tokens);
  Carver measure(nullptr);
  measure.take<std::int32_t>(2);
  measure.take<std::int32_t>(t);
  m.carve_compute(measure, tokens, tokens);
  Carver c(m.workspace.reserve(measure.used()));
  std::int32_t* offsets = c.take<std::int32_t>(2);
  std::int32_t* identity = c.take<std::int32_t>(t);
  m.start_call();
  m.reading(
      [&] { m.shared(x, tokens, out, offsets, identity, m.carve_compute(c, tokens, tokens)); });
  m.stop_if_interrupted();
  return true;
}

void MoeLayer::Steps::combine(const MoeLayer& layer, const float* weights, const float* slot_out,
                              const float* shared, std::int64_t tokens, float* y) {
  const MoeLayer::Impl& m = *layer.impl_;
  m.check_tokens("combine", tokens);
  const LayerSpec& s = m.spec();
  m.require_output_outside_weights(
      dense_bytes("y", y, static_cast<std::size_t>(tokens * s.hidden) * sizeof(float)));
  m.start_call();
  combine_slots(*m.pool, weights, slot_out, shared, s.top_k, s.hidden, tokens, y);
  m.stop_if_interrupted();
}

void MoeLayer::set_runtime(Runtime& runtime) noexcept {
  impl_->runtime = &runtime;
  impl_->pool = &pool_of(runtime);
}
int MoeLayer::threads() const noexcept {
  return impl_->pool->size();
}
Runtime& MoeLayer::runtime() const noexcept {
  return *impl_->runtime;
}
const Placement& MoeLayer::placement() const noexcept {
  return impl_->placement;
}
int MoeLayer::ep_rank() const noexcept {
  return impl_->rank;
}
ExpertRange MoeLayer::experts() const noexcept {
  const auto& parts = impl_->parts;
  return parts.empty() ? ExpertRange{}
                       : ExpertRange{parts.front().experts.begin, parts.back().experts.end};
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
  std::size_t total = 0;
  impl_->carve(nullptr, tokens, /*bf16_io=*/false, total);
  return total;
}
std::uint64_t MoeLayer::workspace_allocations() const noexcept {
  return impl_->workspace.growths();
}
std::size_t MoeLayer::packed_weight_bytes() const noexcept {
  std::size_t bytes = impl_->shared_kernel ? impl_->shared_kernel->packed_bytes() : 0;
  for (const Impl::Part& p : impl_->parts) bytes += p.kernel->packed_bytes();
  return bytes;
}

std::span<const ArrayBytes> MoeLayer::weight_bytes_read() const noexcept {
  return impl_->read_in_place;
}

bool MoeLayer::reads_weight_views() const noexcept {
  const Impl& m = *impl_;
  if (m.spec().routing == RoutingMethod::hash) return true;
  if (m.shared_kernel && m.shared_kernel->packed_bytes() == 0) return true;
  for (const Impl::Part& p : m.parts)
    if (p.kernel->packed_bytes() == 0) return true;
  return false;
}

MoeLayer make_layer(const LayerSpec& spec, const LayerWeights& weights, const Hardware& hw,
                    const Request& request, Runtime& runtime) {
  const Deployment d{spec, hw, request};
  return MoeLayer(weights, select(d, preferences_for(spec.family)), runtime);
}

}  // namespace mxmoe
