// What one forward call of a MoE layer costs in weight bytes and arithmetic, how many layer
// copies make weights stream from DRAM, and the routing the bench feeds the layer.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "mxmoe/layer_spec.hpp"
#include "mxmoe/placement.hpp"

namespace mxmoe::perf {

// MXFP4 bytes (E2M1 blocks + E8M0 scales) of one routed expert: W1 [2I, H] and W2 [H, I].
std::uint64_t expert_weight_bytes(const LayerSpec& spec);
// The same for the fused shared experts (0 when the layer has none); read on every call. A
// shared expert that is not MXFP4 counts the bytes the dense kernel reads: 2 per weight for
// bf16 and FP8 sources (kept as exact bf16), 4 for f32.
std::uint64_t shared_weight_bytes(const LayerSpec& spec);
// Expert weight bytes a call reads when `distinct_experts` routed experts receive tokens.
std::uint64_t touched_weight_bytes(const LayerSpec& spec, int distinct_experts);
// All expert weight bytes of the layer (every routed expert + shared).
std::uint64_t layer_weight_bytes(const LayerSpec& spec);
// Floating-point operations of the expert GEMMs (a multiply-add counts 2):
//   2 x tokens x (top_k x 3 x H x I + 3 x H x Is). Router and combine are not counted.
double layer_flops(const LayerSpec& spec, std::int64_t tokens);

// What one rank of an expert-parallel group holds for one layer: its routed experts' MXFP4
// weights and biases, and what every rank holds whole (router weights as stored in BF16 plus
// the layer's float32 copy, selection bias, the shared expert).
struct RankMemory {
  int rank = 0;
  int experts = 0;
  std::uint64_t expert_bytes = 0;
  std::uint64_t replicated_bytes = 0;
  std::uint64_t total() const { return expert_bytes + replicated_bytes; }
};
std::vector<RankMemory> rank_memory(const LayerSpec& spec, const Placement& placement);

// Distinct ids in [0, num_experts) among `ids` (others are ignored).
int count_distinct_experts(std::span<const std::int32_t> ids, int num_experts);

// How many distinct copies of a layer to cycle through: enough to exceed 4x the last-level
// cache when streaming, bounded by the memory budget (at least 1); 1 when cache-resident.
struct CopyPlan {
  int copies = 1;
  std::uint64_t total_bytes = 0;
  double llc_multiple = 0;  // total_bytes / llc_bytes (0 when the LLC size is unknown)
  std::string mode;         // "streaming: 5 copies, 2.1 GB (4.4x LLC)"
};
CopyPlan plan_copies(std::uint64_t bytes_per_copy, std::uint64_t llc_bytes,
                     std::uint64_t budget_bytes, bool cache_resident);

// Routing for the bench: every token gets top_k distinct experts, drawn from a stream of
// random permutations of all experts, so each expert is used once before any is reused.
// Successive calls on one layer copy therefore touch different experts (a small batch does
// not keep re-reading weights that are still in cache), and a large batch loads the experts
// evenly, as a well-trained router does. Weights are positive and sum to 1 per token.
class BalancedRouting {
 public:
  BalancedRouting(int num_experts, int top_k, std::uint64_t seed);
  // ids/weights: [tokens, top_k].
  void fill(std::int64_t tokens, std::int32_t* ids, float* weights);

 private:
  int num_experts_, top_k_;
  std::mt19937_64 rng_;
  std::vector<std::int32_t> pending_;  // upcoming experts, front first
};

// "1,8,64" -> {1, 8, 64}: integers in [min_value, max_value], duplicates removed, order
// kept. Throws std::invalid_argument naming `what` and the range for an empty list or a bad
// item.
std::vector<int> parse_int_list(const std::string& text, const std::string& what, int min_value,
                                int max_value);
// "a,b" -> {"a", "b"}: non-empty names, duplicates removed, order kept; throws when empty.
std::vector<std::string> parse_name_list(const std::string& text, const std::string& what);

}  // namespace mxmoe::perf
