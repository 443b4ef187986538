#include "io/strict_json.hpp"

#include <set>
#include <vector>

#include "mxmoe/checkpoint.hpp"

namespace mxmoe::io {

nlohmann::json parse_strict_json(std::string_view text, const std::string& label, int max_depth) {
  using nlohmann::json;
  // One key set per open container (arrays get an unused one, which keeps depth simple).
  std::vector<std::set<std::string>> open_keys;
  const auto check = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (static_cast<int>(open_keys.size()) >= max_depth)
          throw LoadError(label + ": JSON nested deeper than " + std::to_string(max_depth) +
                          " levels");
        open_keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open_keys.empty()) open_keys.pop_back();
        break;
      case json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!open_keys.empty() && !open_keys.back().insert(key).second)
          throw LoadError(label + ": duplicate JSON key \"" + key + "\"");
        break;
      }
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    throw LoadError(label + ": invalid JSON: " + e.what());
  }
}

}  // namespace mxmoe::io
