// ElementType's names, their parser (with the former spelling "e4m3") and its per-element facts.
#include "mxmoe/element_type.hpp"

#include <array>
#include <string_view>

#include "base/enum_names.hpp"

namespace mxmoe {
namespace {

constexpr std::array<std::string_view, kElementTypeCount> kElementTypeNames = {"mxfp4", "bf16",
                                                                               "f32", "fp8_e4m3"};

}  // namespace

std::string_view to_string(ElementType v) noexcept {
  return enum_names::name_of(v, kElementTypeNames);
}

std::optional<ElementType> find_element_type(std::string_view text) noexcept {
  for (std::size_t i = 0; i < kElementTypeNames.size(); ++i)
    if (kElementTypeNames[i] == text) return static_cast<ElementType>(i);
  if (text == "e4m3") return ElementType::fp8_e4m3;  // DenseElement's spelling before
  return std::nullopt;
}

ElementType parse_element_type(std::string_view text, std::string_view what) {
  if (const auto t = find_element_type(text)) return *t;
  return enum_names::parse<ElementType>(text, kElementTypeNames, what);  // throws
}

int element_bits(ElementType v) noexcept {
  switch (v) {
    case ElementType::mxfp4:
      return 4;
    case ElementType::bf16:
      return 16;
    case ElementType::f32:
      return 32;
    case ElementType::fp8_e4m3:
      return 8;
  }
  return 0;
}

bool has_block_scales(ElementType v) noexcept {
  return v == ElementType::mxfp4 || v == ElementType::fp8_e4m3;
}

}  // namespace mxmoe
