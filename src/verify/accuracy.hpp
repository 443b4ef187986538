// The documented error budgets (docs/ACCURACY.md), relative L2 over a layer's output:
//  - against_same_format: a backend vs the float64 evaluation that rounds its GEMM inputs
//    the same way (only accumulation differs; for quantized formats, also the rare element
//    that sits on a rounding boundary and flips by one quantum);
//  - format_error: the layer in this format vs the unquantized float64 layer.
#pragma once

#include "mxmoe/deployment.hpp"

namespace mxmoe {

struct AccuracyBudget {
  double against_same_format;
  double format_error;
};

constexpr AccuracyBudget accuracy_budget(ActivationFormat f) noexcept {
  switch (f) {
    case ActivationFormat::f32:
      return {1e-5, 1e-5};
    case ActivationFormat::bf16:
      return {1e-4, 1e-2};
    case ActivationFormat::int8:
      return {1e-4, 2.5e-2};
    case ActivationFormat::mxfp8:
      return {5e-4, 8e-2};
  }
  return {0, 0};
}

// A run's budget against the same rounding: the format's, plus one element of an activation
// vector rounded to its other neighbour, the one that moves the output most (LARGEST_FLIP, from
// evaluate_f64, over OUTPUT_NORM, the L2 norm of the whole output). The reference cannot know
// which side of a rounding tie a float32 backend lands on for an element within its float
// error of the tie; with many tokens such flips average out under the format's figure, with
// one or two tokens a single flip of a large element exceeds it (docs/ACCURACY.md).
inline double same_format_budget(ActivationFormat f, double largest_flip, double output_norm) {
  return accuracy_budget(f).against_same_format + (output_norm > 0 ? largest_flip / output_norm : 0.0);
}

}  // namespace mxmoe
