// Strict JSON reading shared by the plain-data types (Hardware, LayerSpec, Deployment,
// Selection): a saved file is replayed only if every key is known and none is missing, so
// a typo can never silently fall back to a default.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mxmoe::json_fields {

// Keys keep the order they were written in, so saved files read in a sensible order.
using Json = nlohmann::ordered_json;

// Parses text; throws std::invalid_argument naming `what` on a syntax error.
Json parse(std::string_view text, std::string_view what);

// Throws std::invalid_argument unless j is an object holding exactly `keys` (names the
// first missing or unknown key).
void expect_keys(const Json& j, std::string_view what,
                 std::initializer_list<std::string_view> keys);

// j[key] converted to T; a type mismatch throws std::invalid_argument naming the key.
template <class T>
T get(const Json& j, std::string_view what, const char* key) {
  try {
    return j.at(key).get<T>();
  } catch (const Json::exception& e) {
    throw std::invalid_argument(std::string(what) + ": field \"" + key + "\": " + e.what());
  }
}

}  // namespace mxmoe::json_fields
