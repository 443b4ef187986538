// Batch-invariance checker: a token's output must be the same bits whether it runs alone or
// at any position of any batch, with any neighbours, any thread count, on any run. Used by
// tests/invariance (the conformance suite behind BackendCapabilities::
// batch_invariant_activations) and by `mxmoe verify --batch-invariant`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mxmoe/layer.hpp"

namespace mxmoe {

// How the layer routes the probe tokens.
enum class InvarianceRouting : std::uint8_t {
  router,  // forward(): the layer's own router GEMM (+ bias) and routing (with the tokens'
           // ids for a hash layer)
  logits,  // forward() with router_logits: given router logits (crafted ties, one hot expert, ...)
  routed,  // forward() with expert_ids, expert_weights: given routing
};

// A pool of tokens; every batch the checker runs is drawn from it, so every row of every
// batch is a probe whose alone-output is known.
struct InvarianceInputs {
  InvarianceRouting routing = InvarianceRouting::routed;
  std::int64_t tokens = 0;
  std::vector<float> x;                 // [tokens, H]
  std::vector<float> logits;            // [tokens, E] for logits
  std::vector<std::int32_t> ids;        // [tokens, top_k] for routed
  std::vector<float> route_weights;     // [tokens, top_k] for routed
  std::vector<std::int32_t> token_ids;  // [tokens] for router on a hash layer, else empty
};

struct InvarianceOptions {
  std::vector<std::int64_t> batch_sizes{1, 2, 3, 7, 16, 31, 64, 127, 257};
  std::vector<int> thread_counts{1, 2};
  int batches_per_size = 2;  // distinct random draws (positions, neighbours) per size
  int repeats = 2;           // runs of the whole sweep; the last one on a freshly built layer
  std::uint64_t seed = 1;
};

struct InvarianceMismatch {
  std::int64_t token = 0;     // index in the pool
  std::int64_t position = 0;  // row inside the batch
  std::int64_t batch_size = 0;
  int threads = 0;
  int run = 0;
  std::int64_t index = 0;  // element of the H outputs
  float alone = 0, batched = 0;
  std::string describe() const;
};

struct InvarianceReport {
  std::int64_t rows_compared = 0;
  std::optional<InvarianceMismatch> first_mismatch;
  bool identical() const noexcept { return !first_mismatch.has_value(); }
};

// Builds the layer on a runtime the checker owns (make_layer is called once, and once more
// for the last repeat), runs every pool token alone with 1 thread as the reference, then every
// batch size (capped at the pool size) x thread count x draw x repeat, comparing each row with
// memcmp. Stops at the first mismatch. Throws std::invalid_argument for inputs that disagree with
// the spec or empty options, and what the layer throws (bad routing, ...).
InvarianceReport check_batch_invariance(const std::function<MoeLayer(Runtime&)>& make_layer,
                                        const InvarianceInputs& inputs,
                                        const InvarianceOptions& options);

// Random unit-variance tokens with the given routing: router (needs router weights; random
// token ids in [0, vocab) for a hash layer), logits (normal logits), or routed (random
// distinct experts, random positive weights).
InvarianceInputs random_invariance_inputs(const LayerSpec& spec, InvarianceRouting routing,
                                          std::int64_t tokens, std::uint64_t seed);

}  // namespace mxmoe
