// A DenseView (f32 or bf16 view) copied into float32, for paths that read it many times, and
// the scan for values that are not finite, which validate() and the checkpoint reader share.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "mxmoe/weights.hpp"

namespace mxmoe {

// All rows x cols values in order; empty for an empty view.
std::vector<float> to_floats(const DenseView& v);

// The index of the first NaN or Inf among COUNT values of DTYPE at DATA, or nullopt. DATA is
// read byte by byte, so it need not be aligned (a tensor in a safetensors file may not be).
std::optional<std::size_t> first_non_finite(DType dtype, const void* data, std::size_t count);

}  // namespace mxmoe
