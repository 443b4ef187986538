// A DenseView (f32 or bf16 view) copied into float32, for paths that read it many times, the
// scan for values that are not finite, which validate() and the checkpoint reader share, and
// the one refusal of an element type a view cannot hold.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "mxmoe/weights.hpp"

namespace mxmoe {

// All rows x cols values in order; empty for an empty view.
std::vector<float> to_floats(const DenseView& v);

// The index of the first NaN or Inf among COUNT values of DTYPE at DATA, or nullopt. DATA is
// read byte by byte, so it need not be aligned (a tensor in a safetensors file may not be).
// Throws std::invalid_argument for a DTYPE other than f32 and bf16.
std::optional<std::size_t> first_non_finite(ElementType dtype, const void* data, std::size_t count);

// What each view holds, as refuse_element's messages say it.
inline constexpr std::string_view kDenseViewHolds = "f32 or bf16";
inline constexpr std::string_view kDenseMatrixViewHolds = "f32, bf16 or fp8_e4m3";

// Throws std::invalid_argument "a VIEW holds HOLDS, not T" (e.g. "a DenseView holds f32 or
// bf16, not fp8_e4m3"), after "TENSOR: " when a tensor is named.
[[noreturn]] void refuse_element(std::string_view view, std::string_view holds, ElementType t,
                                 std::string_view tensor = {});

}  // namespace mxmoe
