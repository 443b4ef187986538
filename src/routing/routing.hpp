// Routing: per token, router logits [E] -> the top-k expert ids and their combine weights,
// by the spec's RoutingMethod (math in docs/MODELS.md). Deterministic: ties break toward the
// lower expert index; ids are written in selection order (descending score). Nothing here
// allocates: results go to caller buffers, temporaries to a caller-provided scratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

// Floats of scratch route_logits needs per call (independent of the token count).
std::size_t routing_scratch_floats(const LayerSpec& spec) noexcept;

// logits [tokens, E]; selection_bias [E] when spec.routing_params.selection_bias, else
// ignored (may be null). Writes ids and weights [tokens, top_k]. Not for hash routing
// (std::invalid_argument: it needs token ids, see route_hash).
// Throws std::invalid_argument naming the token for a NaN or +inf logit. -inf logits are
// legal: such experts are chosen last, and every token still gets top_k distinct experts.
void route_logits(const LayerSpec& spec, const float* logits, const float* selection_bias,
                  std::int64_t tokens, std::int32_t* ids, float* weights, std::span<float> scratch);

// Hash routing (RoutingMethod::hash, DeepSeek-V4's first layers): token t's experts are
// table[token_ids[t]] in table order (the slot order), and its weights the router scores of
// those experts (routing_params.score_function of the logits [tokens, E]), divided by their
// sum + 1e-20 when renormalize, times routed_scaling_factor. Throws std::invalid_argument
// naming the token for a token id outside [0, spec.vocab), a null token_ids, or a NaN or
// +inf logit. The table is validated when the layer's weights are (validate(spec, weights)).
void route_hash(const LayerSpec& spec, const float* logits, const TokenExpertTable& table,
                const std::int32_t* token_ids, std::int64_t tokens, std::int32_t* ids,
                float* weights, std::span<float> scratch);

// Throws std::invalid_argument unless token_ids is non-null and every id lies in
// [0, spec.vocab); the message names the token.
void validate_token_ids(const LayerSpec& spec, const std::int32_t* token_ids, std::int64_t tokens);

// Checks externally computed routing [tokens, top_k]: ids in [0, E) and distinct within a
// token, weights finite. Throws std::invalid_argument naming the token and the slot.
void validate_routing(const LayerSpec& spec, const std::int32_t* ids, const float* weights,
                      std::int64_t tokens);

// Routing from the layer's own router tensors, for tools (run, verify, bench): logits
// W_r x + b_r accumulated in double and rounded to float once, the selection bias, then
// route_logits (route_hash with token_ids [tokens] for a hash layer; ignored otherwise).
// Allocates; the layer's hot path has its own buffers. Throws std::invalid_argument when the
// layer has no router weights, or is hash-routed and token_ids is null.
void route_with_router(const LayerSpec& spec, const LayerWeights& weights, const float* x,
                       std::int64_t tokens, std::int32_t* ids, float* combine_weights,
                       const std::int32_t* token_ids = nullptr);

}  // namespace mxmoe
