// MoeLayer: one MoE layer bound to its weights, the oracle's selection and a Runtime.
//   forward(x[M,H]) -> y[M,H]: route -> quantize activations once per token -> group tokens
//   by expert -> GEMM1 (+b1) -> activation -> GEMM2 (+b2) -> weighted combine (+ shared).
// y is the layer's output before the transformer block's residual add. The workspace is
// reused across calls: after the first call at a given size, forward does not allocate.
//
// Threads: the layer computes on its Runtime's pool. One layer must not be called from two
// threads at once (its workspace is its own); two layers may be, and share the Runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "mxmoe/edge_checks.hpp"
#include "mxmoe/export.h"
#include "mxmoe/oracle.hpp"
#include "mxmoe/placement.hpp"
#include "mxmoe/runtime.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

// The arrays of one MoeLayer::forward call, all row-major, M = tokens. One input (x or x_bf16),
// one output of the same type (y or y_bf16), and at most one routing source:
//   - none: the layer's router (+ bias); a hash-routed layer (RoutingMethod::hash, DeepSeek-V4's
//     tid2eid) routes by token_ids instead, which it needs for M > 0 (refused first, naming the
//     form; ids outside [0, spec().vocab) are refused naming the token); other layers ignore
//     token_ids, so a host may pass them to every layer;
//   - router_logits [M, E]: routes from these logits (not for a hash layer);
//   - expert_ids with expert_weights [M, top_k] (as engines pass them): the routing itself,
//     validated (ids in range and distinct per token, weights finite and >= 0).
// bf16 is raw uint16 bits, computed in float32 inside. Refused with std::invalid_argument
// naming the fields: both of an input (output) pair, neither for M > 0, x and y of different
// types, expert_ids without expert_weights or the reverse, router_logits with expert_ids,
// token_ids with router_logits or expert_ids (they would be ignored). An array of 0 tokens may
// be null. The fields are in the order calls name them:
//   layer.forward({.tokens = m, .x = x, .y = y});
//   layer.forward({.tokens = m, .x_bf16 = xb, .y_bf16 = yb, .token_ids = ids});
//   layer.forward({.tokens = m, .x = x, .y = y, .expert_ids = ids, .expert_weights = w});
struct ForwardArgs {
  std::int64_t tokens = 0;                   // M
  const float* x = nullptr;                  // [M, H] float32 input, or
  const std::uint16_t* x_bf16 = nullptr;     // [M, H] bf16 input
  float* y = nullptr;                        // [M, H] float32 output, or
  std::uint16_t* y_bf16 = nullptr;           // [M, H] bf16 output
  const std::int32_t* token_ids = nullptr;   // [M] the model's input ids
  const float* router_logits = nullptr;      // [M, E]
  const std::int32_t* expert_ids = nullptr;  // [M, top_k], with
  const float* expert_weights = nullptr;     // [M, top_k]
};

class MXMOE_API MoeLayer {
 public:
  // The runtime must outlive the layer, and so must the weights (views) while
  // reads_weight_views() is true: a backend that packs its own copy reads them only here. With an
  // expert-parallel Request (ep_size > 1) the layer packs, checks and computes only the experts
  // placement_of(request) gives its rank (it reads no page of the others): it is then one rank's
  // part of an ExpertParallelLayer (mxmoe/expert_parallel.hpp), and forward() refuses to run
  // unless it holds every expert. Throws std::invalid_argument if the weights disagree with
  // the spec, and NoBackendError if selection.chosen is empty.
  MoeLayer(const LayerWeights& weights, Selection selection, Runtime& runtime);
  ~MoeLayer();
  MoeLayer(MoeLayer&&) noexcept;
  MoeLayer& operator=(MoeLayer&&) noexcept;

  // One layer call: y = the layer on x, for args.tokens tokens (see ForwardArgs for what each
  // field may be and which combinations are refused). Checks everything before any work
  // (std::invalid_argument, y untouched): the combination of fields, the layer holds every
  // expert, tokens in [0, max_tokens()], x finite (naming the tokens: require_finite_input,
  // mxmoe/edge_checks.hpp), a hash layer's token ids, given routing. 0 tokens does nothing.
  void forward(const ForwardArgs& args);

  // Moves the layer onto another runtime (which must outlive it), e.g. to measure it at
  // another thread count. The results do not change: they never depend on the thread count.
  void set_runtime(Runtime& runtime) noexcept;

  const Selection& selection() const noexcept;
  const LayerSpec& spec() const noexcept;
  Runtime& runtime() const noexcept;
  int threads() const noexcept;  // the Runtime's
  // Where the routed experts live, and this layer's rank: it holds and computes
  // placement().experts_of(ep_rank()) (every expert without expert parallelism).
  const Placement& placement() const noexcept;
  int ep_rank() const noexcept;
  // The routed experts this layer holds as one range: all of them without expert
  // parallelism, its range with contiguous placement; with a scattered placement, the
  // smallest range that covers them ({0, 0} when it holds none).
  ExpertRange experts() const noexcept;
  // The most tokens one call may carry: slots (tokens x top_k) are numbered in 32 bits.
  // forward() throws std::invalid_argument for more.
  std::int64_t max_tokens() const noexcept;
  // Bytes of workspace a call with TOKENS tokens needs (allocated by the first such call), so
  // a host can refuse a batch that would not fit in memory before allocating anything.
  // Throws std::invalid_argument for tokens outside [0, max_tokens()].
  std::size_t workspace_bytes(std::int64_t tokens) const;
  // Times the workspace grew (a test hook for "no allocation after warm-up").
  std::uint64_t workspace_allocations() const noexcept;
  // Bytes the chosen backend keeps resident for packed weights (0 when it reads the views).
  std::size_t packed_weight_bytes() const noexcept;
  // Whether computing reads the bytes behind the LayerWeights the layer was made from: true
  // when a kernel computes from the views (the reference backend) or the layer is hash-routed
  // (its tid2eid table is read in place). False when the backend packed its own copy of every
  // expert weight and bias: the bytes are then not read again once the constructor has
  // returned, so a host may free them (the router's weight and biases are always copied).
  bool reads_weight_views() const noexcept;
  // The bytes of those views computing reads at every call (empty when reads_weight_views() is
  // false), each named ("w13 weights", "w2 bias", ...): an output sharing a byte with one of them
  // is refused (forward() checks y; the C API and Python name their own output), since writing it
  // would change every later answer.
  std::span<const ArrayBytes> weight_bytes_read() const noexcept;

  // forward() step by step, for the library's expert parallelism: declared here so that it may
  // reach the layer's state, defined (and used) only inside the library.
  struct Steps;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Convenience: judge with the family's preferences and build the layer (throws
// NoBackendError when nothing fits).
MXMOE_API MoeLayer make_layer(const LayerSpec& spec, const LayerWeights& weights,
                              const Hardware& hw, const Request& request, Runtime& runtime);

}  // namespace mxmoe
