#include "oracle/json_fields.hpp"

#include <algorithm>

namespace mxmoe::json_fields {

Json parse(std::string_view text, std::string_view what) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    throw std::invalid_argument(std::string(what) + ": invalid JSON: " + e.what());
  }
}

void expect_keys(const Json& j, std::string_view what,
                 std::initializer_list<std::string_view> keys) {
  if (!j.is_object())
    throw std::invalid_argument(std::string(what) + ": expected a JSON object, got " +
                                std::string(j.type_name()));
  for (const auto& item : j.items())
    if (std::find(keys.begin(), keys.end(), item.key()) == keys.end())
      throw std::invalid_argument(std::string(what) + ": unknown field \"" + item.key() + "\"");
  for (std::string_view key : keys)
    if (!j.contains(key))
      throw std::invalid_argument(std::string(what) + ": missing field \"" + std::string(key) +
                                  "\"");
}

}  // namespace mxmoe::json_fields
