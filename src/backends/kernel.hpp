// The contract between the runtime and a backend's compute: the runtime routes and groups
// tokens by expert; the kernel quantizes activations (once per token), runs GEMM1 (+b1),
// the activation, GEMM2 (+b2) for every (local expert, token) slot and writes the
// unweighted expert output per slot. The runtime then combines slots in a fixed order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mxmoe {

class ThreadPool;

// Tokens grouped by expert (a counting sort of the routing), built by the runtime.
struct ExpertBatch {
  std::int64_t tokens = 0;  // M
  int top_k = 0;
  int num_experts = 0;
  // slots[expert_offsets[e] .. expert_offsets[e+1]) are the slots routed to expert e, a slot
  // being s = t * top_k + k (token t, its k-th choice), ascending in t within an expert.
  const std::int32_t* expert_offsets = nullptr;  // [num_experts + 1]
  const std::int32_t* slots = nullptr;           // [tokens * top_k]
  int expert_begin = 0, expert_end = 0;          // the local experts (expert parallelism)
};

struct ExpertForward {
  const float* x = nullptr;  // [tokens, H] layer input, float32, not yet quantized
  ExpertBatch batch;
  // [tokens * top_k, H]: slot_out[s] = W2 . act(W1 . q(x_t) + b1) + b2 for every slot of a
  // local expert; slots of other experts are not written.
  float* slot_out = nullptr;
  ThreadPool* pool = nullptr;      // never null in run() (a 1-thread pool runs tasks inline)
  std::byte* workspace = nullptr;  // workspace_bytes(tokens, pool threads), 64-byte aligned
  std::size_t workspace_size = 0;
};

// A backend's packed weights and compute for one layer. Created by Backend::create.
// run() is the hot path: it must not allocate, throw or log, and its results must not
// depend on the thread count (never split a K reduction across threads).
class ExpertKernel {
 public:
  virtual ~ExpertKernel() = default;
  virtual std::size_t workspace_bytes(std::int64_t tokens, int threads) const noexcept = 0;
  virtual void run(const ExpertForward& f) const noexcept = 0;
  // Resident bytes of weights this kernel packed (0 when it reads the LayerWeights views).
  virtual std::size_t packed_bytes() const noexcept = 0;
};

}  // namespace mxmoe
