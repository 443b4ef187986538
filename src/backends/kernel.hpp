// The contract between the runtime and a backend's compute. The runtime routes and groups
// slots by expert; the kernel quantizes activations (once per input row), runs GEMM1 (+b1),
// the activation and GEMM2 (+b2) for every slot of the experts it holds and writes the
// unweighted expert output per slot. The runtime then combines slots in a fixed order.
//
// Three seams make the same kernel serve one process and an expert-parallel group:
//   - Expert range: a kernel holds only the experts it was created with. Backend::create
//     receives a LayerWeights slice (slice_experts) and a spec whose num_experts is the
//     slice's count; inside run() experts are numbered 0..num_experts-1 (local).
//   - Slot -> row map: a slot names the input row it reads (slot_rows), so rows may come
//     from a dispatch buffer (one row per arriving slot) as well as from `token = s / top_k`.
//   - Execution context: the thread pool is passed into every run(), owned by a Runtime
//     that all layers of a process share (never one pool per layer).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mxmoe {

class ThreadPool;

// Slots grouped by the kernel's (local) experts: a counting sort built by the runtime.
struct ExpertBatch {
  std::int64_t slots = 0;  // S: (row, expert) pairs of this call
  int num_experts = 0;     // experts the kernel holds
  // order[expert_offsets[e] .. expert_offsets[e+1]) are the slots of local expert e,
  // ascending within an expert.
  const std::int32_t* expert_offsets = nullptr;  // [num_experts + 1]
  const std::int32_t* order = nullptr;           // [S]
  // slot_rows[s]: the row of x slot s reads (0 <= slot_rows[s] < ExpertForward::rows).
  const std::int32_t* slot_rows = nullptr;  // [S]
};

struct ExpertForward {
  const float* x = nullptr;  // [rows, H] layer input, float32, not yet quantized
  std::int64_t rows = 0;
  ExpertBatch batch;
  // [S, H]: slot_out[s] = W2 . act(W1 . q(x[slot_rows[s]]) + b1) + b2 for every slot.
  float* slot_out = nullptr;
  ThreadPool* pool = nullptr;      // never null in run() (a 1-thread pool runs tasks inline)
  std::byte* workspace = nullptr;  // workspace_bytes(rows, slots, pool threads), 64-byte aligned
  std::size_t workspace_size = 0;
};

// A backend's packed weights and compute for the experts of one layer it was given.
// Created by Backend::create. run() is the hot path: it must not allocate, throw or log, and
// its results must not depend on the thread count (never split a K reduction across threads)
// nor on which other slots share the call.
class ExpertKernel {
 public:
  virtual ~ExpertKernel() = default;
  virtual std::size_t workspace_bytes(std::int64_t rows, std::int64_t slots,
                                      int threads) const noexcept = 0;
  virtual void run(const ExpertForward& f) const noexcept = 0;
  // Resident bytes of weights this kernel packed (0 when it reads the LayerWeights views). A
  // kernel that packs keeps no pointer into the views: the weights and biases it computes
  // with are all in its copy (MoeLayer::reads_weight_views, and the hosts that free their
  // tensors after binding a layer, rely on it).
  virtual std::size_t packed_bytes() const noexcept = 0;
};

}  // namespace mxmoe
