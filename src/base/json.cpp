#include "base/json.hpp"

#include <algorithm>
#include <set>
#include <vector>

namespace mxmoe::json {

namespace {
// Thrown from the parser callback to stop at the first violation (the text after it is
// never scanned); caught below and turned into the error text.
struct Violation {
  std::string reason;
};
}  // namespace

std::optional<Json> try_parse_strict(std::string_view text, int max_depth, std::string& error) {
  // One key set per open container (arrays get an unused one, which keeps depth simple).
  std::vector<std::set<std::string>> open_keys;
  const auto check = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (static_cast<int>(open_keys.size()) >= max_depth)
          throw Violation{"JSON nested deeper than " + std::to_string(max_depth) + " levels"};
        open_keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        if (!open_keys.empty()) open_keys.pop_back();
        break;
      case Json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!open_keys.empty() && !open_keys.back().insert(key).second)
          throw Violation{"duplicate JSON key \"" + key + "\""};
        break;
      }
      case Json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
  } catch (const Violation& v) {
    error = v.reason;
  } catch (const Json::exception& e) {
    error = std::string("invalid JSON: ") + e.what();
  }
  return std::nullopt;
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

}  // namespace mxmoe::json
