// A DenseView (f32 or bf16 view) copied into float32, for paths that read it many times.
#pragma once

#include <vector>

#include "mxmoe/weights.hpp"

namespace mxmoe {

// All rows x cols values in order; empty for an empty view.
std::vector<float> to_floats(const DenseView& v);

}  // namespace mxmoe
