// A float64 evaluation of a MoE layer for `mxmoe verify`: the weights dequantized exactly,
// double everywhere else. With a format, both GEMM inputs are rounded to it exactly as the
// backends do (x per token; the activation output rounded to float, then to the format), so
// the only difference to a backend is the rounding of accumulation. Without one, it is the
// unquantized layer, which measures the format's own error.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mxmoe/deployment.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

class ThreadPool;

// x [tokens, H]; ids/weights [tokens, top_k] (the routing to evaluate). Returns y [tokens, H],
// the whole layer's output (an expert-parallel group computes exactly that on the token's
// rank, so there is no per-rank form to evaluate). pool may be null (one thread).
// int16_blocks (with a format): the MXFP4 experts' GEMM inputs are also rounded as avx2_int16
// rounds them (round_activations_int16_blocks; rounds_to_int16_blocks(backend) says which
// backend does).
// largest_flip (bf16 only; else set to 0): the largest change, in L2 over one token's output,
// that one element of an activation vector a rounded to its other bf16 neighbour makes:
// max of weight x the element's bf16 step x the norm of its W2 column. A float32 backend's a
// differs from this evaluation's by its own rounding (accumulation over K, the activation in
// float); an element within that of a rounding tie rounds the other way there, and moves the
// output by that much (docs/ACCURACY.md, "Same rounding").
std::vector<double> evaluate_f64(const LayerSpec& spec, const LayerWeights& w, const float* x,
                                 std::int64_t tokens, const std::int32_t* ids, const float* weights,
                                 std::optional<ActivationFormat> format,
                                 ThreadPool* pool = nullptr, bool int16_blocks = false,
                                 double* largest_flip = nullptr);

}  // namespace mxmoe
