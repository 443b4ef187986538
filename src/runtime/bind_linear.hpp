// The one place a dense layer is bound: the oracle judges the mode's kernels on the layer
// (judge_each over dense::candidates, src/oracle/judge_each.hpp) and dense::Linear binds its
// choice. Here, above both (room 7: the whole model's decoder in src/llm and the public
// DenseLinear ask through it), because the Linear (src/backends, room 5) may not call the
// oracle (room 6): docs/ARCHITECTURE.md, "The dense kernels on that contract".
#pragma once

#include "backends/dense/dense_linear.hpp"
#include "mxmoe/hardware.hpp"
#include "oracle/judge_each.hpp"

namespace mxmoe {

class ThreadPool;

// Throws std::invalid_argument naming w.name: bad weights, or no kernel of MODE runs the layer
// on HARDWARE (then every kernel's reasons). compact_int8 packs on PACK_POOL (nullptr: the
// caller).
inline dense::Linear bind_linear(const dense::LinearWeights& w, dense::DenseMode mode,
                                 const Hardware& hardware, ThreadPool* pack_pool = nullptr) {
  return dense::Linear(w, judge_each(dense::dense_op(w, mode, hardware), dense::candidates(mode)),
                       pack_pool);
}

// The whole model's rule for a request that names bf16 activations: mode as_published_bf16
// where an ISA kernel of it takes the layer (bf16 weights, in <= kBf16MaxIn, a CPU with AVX-512
// BF16), else as_published (without vdpbf16ps, rounding the activations buys no speed, only
// error). Each mode is judged once at most.
inline dense::Linear bind_linear_bf16_where_fast(const dense::LinearWeights& w,
                                                 const Hardware& hardware) {
  dense::LinearSelection judged =
      judge_each(dense::dense_op(w, dense::DenseMode::as_published_bf16, hardware),
                 dense::candidates(dense::DenseMode::as_published_bf16));
  if (!dense::chose_isa_kernel(judged))
    judged = judge_each(dense::dense_op(w, dense::DenseMode::as_published, hardware),
                        dense::candidates(dense::DenseMode::as_published));
  return dense::Linear(w, judged);
}

}  // namespace mxmoe
