// Name tables for the closed enums: one array per enum, indexed by the enumerator's value,
// so to_string and parse cannot disagree.
#pragma once

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mxmoe::enum_names {

template <class Enum>
std::string_view name_of(Enum value, std::span<const std::string_view> names) noexcept {
  const auto index = static_cast<std::size_t>(value);
  return index < names.size() ? names[index] : std::string_view("invalid");
}

// Throws std::invalid_argument: "unknown <what> 'x' (valid: a, b, c)".
template <class Enum>
Enum parse(std::string_view text, std::span<const std::string_view> names, std::string_view what) {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return static_cast<Enum>(i);
  std::string valid;
  for (std::string_view n : names) {
    if (!valid.empty()) valid += ", ";
    valid += n;
  }
  throw std::invalid_argument("unknown " + std::string(what) + " '" + std::string(text) +
                              "' (valid: " + valid + ")");
}

}  // namespace mxmoe::enum_names
