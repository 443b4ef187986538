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

#include "mxmoe/export.h"
#include "mxmoe/oracle.hpp"
#include "mxmoe/placement.hpp"
#include "mxmoe/runtime.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

class MXMOE_API MoeLayer {
 public:
  // The runtime must outlive the layer, and so must the weights (views) while
  // reads_weight_views() is true: a backend that packs its own copy reads them only here. With an
  // expert-parallel Request (ep_size > 1) the layer packs, checks and computes only the experts
  // placement_of(request) gives its rank (it reads no page of the others): it is then one rank's
  // part of an ExpertParallelLayer (mxmoe/expert_parallel.hpp), and the forward calls below refuse
  // to run unless it holds every expert. Throws std::invalid_argument if the weights disagree with
  // the spec, and NoBackendError if selection.chosen is empty.
  MoeLayer(const LayerWeights& weights, Selection selection, Runtime& runtime);
  ~MoeLayer();
  MoeLayer(MoeLayer&&) noexcept;
  MoeLayer& operator=(MoeLayer&&) noexcept;

  // Routes with the layer's router weights (+ bias). x, y: [M, H] float32, row-major.
  // A hash-routed layer (RoutingMethod::hash) needs the tokens' ids: this form throws
  // std::invalid_argument for it.
  void forward(const float* x, std::int64_t tokens, float* y);
  // The same with the tokens' ids [M] (the model's input ids): a hash layer's experts are
  // tid2eid[token id] (ids outside [0, spec().vocab) throw std::invalid_argument naming the
  // token); other layers ignore them, so a caller may pass ids to every layer.
  void forward(const float* x, const std::int32_t* token_ids, std::int64_t tokens, float* y);
  // Routes from given router logits [M, E] (not for hash layers: std::invalid_argument).
  void forward_logits(const float* x, const float* logits, std::int64_t tokens, float* y);
  // Externally computed routing (as engines pass it): ids/weights [M, top_k]; validated
  // (ids in range and distinct per token, weights finite and >= 0) — throws
  // std::invalid_argument. Every forward form refuses NaN/Inf in x (std::invalid_argument
  // naming the tokens: require_finite_input, mxmoe/edge_checks.hpp).
  void forward_routed(const float* x, const std::int32_t* ids, const float* weights,
                      std::int64_t tokens, float* y);
  // bf16 input/output (raw uint16 bits), computed in float32 inside; with or without the
  // tokens' ids, as forward().
  void forward_bf16(const std::uint16_t* x, std::int64_t tokens, std::uint16_t* y);
  void forward_bf16(const std::uint16_t* x, const std::int32_t* token_ids, std::int64_t tokens,
                    std::uint16_t* y);
  void forward_routed_bf16(const std::uint16_t* x, const std::int32_t* ids, const float* weights,
                           std::int64_t tokens, std::uint16_t* y);

  // ---- The steps of forward() one by one, for expert parallelism (src/dist). ----
  // forward() = route, compute_slots on every (token, slot), shared_expert, combine; an
  // expert-parallel group runs compute_slots on the experts' ranks and the rest on the
  // token's rank, so a token's bits never depend on the number of ranks.
  //
  // The routing of x [M, H] by the layer's router (+ bias, selection bias): ids and weights
  // [M, top_k], slot j of token t at t * top_k + j. A hash layer needs the tokens' ids (the
  // second form; the first throws std::invalid_argument for it), as forward().
  void route(const float* x, std::int64_t tokens, std::int32_t* ids, float* weights);
  void route(const float* x, const std::int32_t* token_ids, std::int64_t tokens, std::int32_t* ids,
             float* weights);
  // Unweighted expert outputs out [slots, H] of slots arriving in a dispatch buffer: slot s
  // applies expert ids[s] (a global expert id this layer holds) to rows[slot_rows[s]] of rows
  // [num_rows, H]. Bits equal forward()'s for the same (row, expert), whatever the other
  // slots. Throws std::invalid_argument for an expert this layer does not hold or a row out
  // of range (a malformed message never reads out of bounds).
  void compute_slots(const float* rows, std::int64_t num_rows, const std::int32_t* ids,
                     const std::int32_t* slot_rows, std::int64_t slots, float* out);
  // The shared expert's output out [M, H] for x [M, H]; false (nothing written) when the
  // layer has none.
  bool shared_expert(const float* x, std::int64_t tokens, float* out);
  // forward()'s combine, the same code: y[t] = sum over j = 0..top_k-1, in that order, of
  // weights[t*k + j] * slot_out[t*k + j] (slot_out [M * top_k, H]), then + shared[t] when
  // shared is not null.
  void combine(const float* weights, const float* slot_out, const float* shared,
               std::int64_t tokens, float* y) const;

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
  // The most tokens one call may carry: slots (tokens x top_k) are numbered in 32 bits. Every
  // forward throws std::invalid_argument for more.
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Convenience: judge with the family's preferences and build the layer (throws
// NoBackendError when nothing fits).
MXMOE_API MoeLayer make_layer(const LayerSpec& spec, const LayerWeights& weights,
                              const Hardware& hw, const Request& request, Runtime& runtime);

}  // namespace mxmoe
