// The steps of MoeLayer::forward one by one, for expert parallelism (src/dist): internal, not
// part of the exported class. forward() = route, compute_slots on every (token, slot),
// shared_expert, combine; an expert-parallel group runs compute_slots on the experts' ranks and
// the rest on the token's rank, so a token's bits never depend on the number of ranks.
#pragma once

#include <cstdint>

#include "mxmoe/layer.hpp"

namespace mxmoe {

struct MoeLayer::Steps {
  // The routing of x [M, H] by the layer's router (+ bias, selection bias): ids and weights
  // [M, top_k], slot j of token t at t * top_k + j. A hash layer routes by the tokens' ids
  // token_ids [M] (null: std::invalid_argument "... it needs the tokens' ids"), as forward();
  // other layers ignore them. Refuses NaN/Inf in x naming the tokens, as forward().
  static void route(MoeLayer& layer, const float* x, const std::int32_t* token_ids,
                    std::int64_t tokens, std::int32_t* ids, float* weights);
  // Unweighted expert outputs out [slots, H] of slots arriving in a dispatch buffer: slot s
  // applies expert ids[s] (a global expert id this layer holds) to rows[slot_rows[s]] of rows
  // [num_rows, H]. Bits equal forward()'s for the same (row, expert), whatever the other
  // slots. Throws std::invalid_argument for an expert this layer does not hold or a row out
  // of range (a malformed message never reads out of bounds).
  static void compute_slots(MoeLayer& layer, const float* rows, std::int64_t num_rows,
                            const std::int32_t* ids, const std::int32_t* slot_rows,
                            std::int64_t slots, float* out);
  // The shared expert's output out [M, H] for x [M, H]; false (nothing written) when the
  // layer has none.
  static bool shared_expert(MoeLayer& layer, const float* x, std::int64_t tokens, float* out);
  // forward()'s combine, the same code: y[t] = sum over j = 0..top_k-1, in that order, of
  // weights[t*k + j] * slot_out[t*k + j] (slot_out [M * top_k, H]), then + shared[t] when
  // shared is not null.
  static void combine(const MoeLayer& layer, const float* weights, const float* slot_out,
                      const float* shared, std::int64_t tokens, float* y);
};

}  // namespace mxmoe
