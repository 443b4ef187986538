// The activation formats' names (mxmoe/format.hpp).
#include <array>

#include "base/enum_names.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe {
namespace {

constexpr std::array<std::string_view, 4> kActivationFormatNames = {"f32", "bf16", "int8", "mxfp8"};

}  // namespace

std::string_view to_string(ActivationFormat f) noexcept {
  return enum_names::name_of(f, kActivationFormatNames);
}

ActivationFormat parse_activation_format(std::string_view s) {
  return enum_names::parse<ActivationFormat>(s, kActivationFormatNames, "activation format");
}

std::vector<ActivationFormat> all_activation_formats() {
  return {ActivationFormat::f32, ActivationFormat::bf16, ActivationFormat::int8,
          ActivationFormat::mxfp8};
}

}  // namespace mxmoe
