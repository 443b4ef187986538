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
std::vector<double> evaluate_f64(const LayerSpec& spec, const LayerWeights& w, const float* x,
                                 std::int64_t tokens, const std::int32_t* ids, const float* weights,
                                 std::optional<ActivationFormat> format,
                                 ThreadPool* pool = nullptr, bool int16_blocks = false);

}  // namespace mxmoe
