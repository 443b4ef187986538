// The dtype names of the safetensors format, their sizes in bits and the element type each
// holds (the one mapping from the file's dtypes to ElementType).
#include <array>

#include "io/safetensors.hpp"

namespace mxmoe {

namespace {
struct DtypeEntry {
  StDtype dtype;
  std::string_view name;
  int bits;
  std::optional<ElementType> element = std::nullopt;
};
constexpr std::array<DtypeEntry, 20> kDtypes{{
    {StDtype::BOOL, "BOOL", 8},
    {StDtype::U8, "U8", 8},
    {StDtype::I8, "I8", 8},
    {StDtype::I16, "I16", 16},
    {StDtype::U16, "U16", 16},
    {StDtype::I32, "I32", 32},
    {StDtype::U32, "U32", 32},
    {StDtype::I64, "I64", 64},
    {StDtype::U64, "U64", 64},
    {StDtype::F4, "F4", 4},
    {StDtype::F6_E2M3, "F6_E2M3", 6},
    {StDtype::F6_E3M2, "F6_E3M2", 6},
    {StDtype::F8_E4M3, "F8_E4M3", 8, ElementType::fp8_e4m3},
    {StDtype::F8_E5M2, "F8_E5M2", 8},
    {StDtype::F8_E8M0, "F8_E8M0", 8},
    {StDtype::F16, "F16", 16},
    {StDtype::BF16, "BF16", 16, ElementType::bf16},
    {StDtype::F32, "F32", 32, ElementType::f32},
    {StDtype::F64, "F64", 64},
    {StDtype::C64, "C64", 64},
}};
}  // namespace

std::string_view to_string(StDtype d) noexcept {
  for (const auto& e : kDtypes)
    if (e.dtype == d) return e.name;
  return "?";
}

std::optional<StDtype> parse_st_dtype(std::string_view name) noexcept {
  for (const auto& e : kDtypes)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}

int dtype_bits(StDtype d) noexcept {
  for (const auto& e : kDtypes)
    if (e.dtype == d) return e.bits;
  return 0;
}

std::optional<ElementType> element_type(StDtype d) noexcept {
  for (const auto& e : kDtypes)
    if (e.dtype == d) return e.element;
  return std::nullopt;
}

}  // namespace mxmoe
