// The one JSON dialect of mxmoe, for every document it reads: checkpoint configs, the
// safetensors header and index, hardware probes, deployments and selections. It adds the
// checks nlohmann::json leaves out: two equal keys in one object are an error (nlohmann
// keeps the last, so two readers of one file could see different values) and nesting is
// bounded. Invalid UTF-8 inside strings is already a parse error in nlohmann.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace mxmoe::json {

// Keys keep the order they were written in, so saved files read in a sensible order.
using Json = nlohmann::ordered_json;

inline constexpr int kDefaultMaxDepth = 64;

// The parsed document, or std::nullopt with `error` set to the reason ("duplicate key
// \"x\"", "nested deeper than 4 levels", "invalid JSON: ...").
std::optional<Json> try_parse_strict(std::string_view text, int max_depth, std::string& error);

// try_parse_strict, throwing Error("WHAT: reason") on failure. Error is the caller's class:
// LoadError for files, std::invalid_argument for text given as an argument.
template <class Error = std::invalid_argument>
Json parse_strict(std::string_view text, std::string_view what, int max_depth = kDefaultMaxDepth) {
  std::string error;
  std::optional<Json> j = try_parse_strict(text, max_depth, error);
  if (!j) throw Error(std::string(what) + ": " + error);
  return std::move(*j);
}

// Throws std::invalid_argument unless j is an object holding exactly `keys` (names the
// first missing or unknown key).
void expect_keys(const Json& j, std::string_view what,
                 std::initializer_list<std::string_view> keys);
// The same, where the `optional` keys may also appear.
void expect_keys(const Json& j, std::string_view what, std::initializer_list<std::string_view> keys,
                 std::initializer_list<std::string_view> optional);

// j[key] converted to T; a type mismatch throws std::invalid_argument naming the key.
// Not for integers: nlohmann converts a float (8.6e49) to an integer type with a cast that is
// undefined behaviour out of range (the hardware fuzz target found one); get_integer checks.
template <class T>
T get(const Json& j, std::string_view what, const char* key) {
  static_assert(!std::is_integral_v<T> || std::is_same_v<T, bool>,
                "json::get of an integer: use json::get_integer (range-checked)");
  try {
    return j.at(key).get<T>();
  } catch (const Json::exception& e) {
    throw std::invalid_argument(std::string(what) + ": field \"" + key + "\": " + e.what());
  }
}

// j[key] as an integer in [min_value, max_value]. A float (1e12), a value outside the range
// or another type throws std::invalid_argument naming the key and the range: never a value
// wrapped into an int.
std::int64_t get_integer(const Json& j, std::string_view what, const char* key,
                         std::int64_t min_value, std::int64_t max_value);

// j[key] as an array of at most max_count integers, each in [min_value, max_value] (the
// rules of get_integer), else std::invalid_argument naming the key, the entry and the range.
std::vector<std::int64_t> get_integer_array(const Json& j, std::string_view what, const char* key,
                                            std::int64_t min_value, std::int64_t max_value,
                                            std::size_t max_count);

// j[key] as a float: a number whose magnitude fits a float (a double such as 1e300 would
// not convert), else std::invalid_argument naming the key.
float get_float(const Json& j, std::string_view what, const char* key);

}  // namespace mxmoe::json
