// ElementType: the one vocabulary of the element types mxmoe's weights are stored in, used by
// the layer spec (weight_format, shared_weight_format), the dense views (DenseView,
// DenseMatrixView) and the checkpoint readers and writers. A view that holds only some of them
// refuses the others by name. A safetensors file's dtypes are the file format's own list
// (StDtype, with integer types); element_type(StDtype) in safetensors.hpp maps them onto this.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "mxmoe/export.h"

namespace mxmoe {

// The values are those WeightFormat had (mxfp4 = 0, ...), so the order of the names in
// messages and any stored value stay as they were.
enum class ElementType : std::uint8_t {
  mxfp4,     // E2M1 codes, two per byte, with one E8M0 scale byte per 32 elements
  bf16,      // bfloat16, the upper half of a float32
  f32,       // IEEE float32
  fp8_e4m3,  // E4M3 ("fn") codes with 128 x 128 block scales (DeepSeek-V4's release)
};

inline constexpr int kElementTypeCount = 4;

// "mxfp4", "bf16", "f32", "fp8_e4m3"; "invalid" for a value outside the enum.
MXMOE_API std::string_view to_string(ElementType) noexcept;
// The inverse of to_string; the former spelling "e4m3" also reads as fp8_e4m3.
MXMOE_API std::optional<ElementType> find_element_type(std::string_view) noexcept;
// The same; throws std::invalid_argument "unknown <what> 'x' (valid: mxfp4, bf16, f32,
// fp8_e4m3)" for any other text.
MXMOE_API ElementType parse_element_type(std::string_view text,
                                         std::string_view what = "element type");

// Bits of one element's code: 4, 16, 32, 8 (block scales not counted).
MXMOE_API int element_bits(ElementType) noexcept;
// Whether the stored elements are multiplied by block scales held beside them (mxfp4: one
// E8M0 byte per 32 elements; fp8_e4m3: one per 128 x 128 block).
MXMOE_API bool has_block_scales(ElementType) noexcept;

}  // namespace mxmoe
