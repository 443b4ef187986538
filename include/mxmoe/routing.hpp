// Routing: per token, router logits [E] -> the top-k expert ids and their combine weights,
// by the spec's RoutingMethod (math in docs/MODELS.md). Deterministic: ties break toward the
// lower expert index; ids are written in selection order (descending score). Nothing here
// allocates: results go to caller buffers, temporaries to a caller-provided scratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "mxmoe/export.h"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

// Floats of scratch route_logits needs per call (independent of the token count).
MXMOE_API std::size_t routing_scratch_floats(const LayerSpec& spec) noexcept;

// logits [tokens, E]; selection_bias [E] when spec.routing_params.selection_bias, else
// ignored (may be null). Writes ids and weights [tokens, top_k].
// Throws std::invalid_argument naming the token for a NaN or +inf logit. -inf logits are
// legal: such experts are chosen last, and every token still gets top_k distinct experts.
MXMOE_API void route_logits(const LayerSpec& spec, const float* logits, const float* selection_bias,
                            std::int64_t tokens, std::int32_t* ids, float* weights,
                            std::span<float> scratch);

// Checks externally computed routing [tokens, top_k]: ids in [0, E) and distinct within a
// token, weights finite. Throws std::invalid_argument naming the token and the slot.
MXMOE_API void validate_routing(const LayerSpec& spec, const std::int32_t* ids,
                                const float* weights, std::int64_t tokens);

// Routing from the layer's own router tensors, for tools (run, verify, bench): logits
// W_r x + b_r accumulated in double and rounded to float once, the selection bias, then
// route_logits. Allocates; the layer's hot path has its own buffers. Throws
// std::invalid_argument when the layer has no router weights.
MXMOE_API void route_with_router(const LayerSpec& spec, const LayerWeights& weights, const float* x,
                                 std::int64_t tokens, std::int32_t* ids, float* combine_weights);

}  // namespace mxmoe
