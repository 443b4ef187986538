#include "base/json.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
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
  expect_keys(j, what, keys, {});
}

void expect_keys(const Json& j, std::string_view what, std::initializer_list<std::string_view> keys,
                 std::initializer_list<std::string_view> optional) {
  if (!j.is_object())
    throw std::invalid_argument(std::string(what) + ": expected a JSON object, got " +
                                std::string(j.type_name()));
  const auto known = [](std::initializer_list<std::string_view> list, const std::string& key) {
    return std::find(list.begin(), list.end(), key) != list.end();
  };
  for (const auto& item : j.items())
    if (!known(keys, item.key()) && !known(optional, item.key()))
      throw std::invalid_argument(std::string(what) + ": unknown field \"" + item.key() + "\"");
  for (std::string_view key : keys)
    if (!j.contains(key))
      throw std::invalid_argument(std::string(what) + ": missing field \"" + std::string(key) +
                                  "\"");
}

std::int64_t get_integer(const Json& j, std::string_view what, const char* key,
                         std::int64_t min_value, std::int64_t max_value) {
  const auto fail = [&](const std::string& got) -> std::int64_t {
    throw std::invalid_argument(std::string(what) + ": field \"" + key +
                                "\": expected an integer in [" + std::to_string(min_value) + ", " +
                                std::to_string(max_value) + "], got " + got);
  };
  if (!j.is_object() || !j.contains(key)) fail("nothing (missing)");
  const Json& v = j.at(key);
  if (!v.is_number_integer()) return fail(v.dump());
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    if (max_value < 0 || u > static_cast<std::uint64_t>(max_value)) return fail(v.dump());
    const auto value = static_cast<std::int64_t>(u);
    return value < min_value ? fail(v.dump()) : value;
  }
  const std::int64_t value = v.get<std::int64_t>();
  return value < min_value || value > max_value ? fail(v.dump()) : value;
}

std::vector<std::int64_t> get_integer_array(const Json& j, std::string_view what, const char* key,
                                            std::int64_t min_value, std::int64_t max_value,
                                            std::size_t max_count) {
  const std::string field = std::string(what) + ": field \"" + key + "\"";
  if (!j.is_object() || !j.contains(key)) throw std::invalid_argument(field + ": missing");
  const Json& a = j.at(key);
  if (!a.is_array() || a.size() > max_count)
    throw std::invalid_argument(field + ": expected an array of at most " +
                                std::to_string(max_count) + " integers");
  std::vector<std::int64_t> out;
  out.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    // One entry at a time through get_integer's rules (an object of one key).
    const Json entry = {{"entry", a[i]}};
    try {
      out.push_back(get_integer(entry, "", "entry", min_value, max_value));
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument(field + ": entry " + std::to_string(i) +
                                  ": expected an integer in [" + std::to_string(min_value) + ", " +
                                  std::to_string(max_value) + "], got " + a[i].dump());
    }
  }
  return out;
}

float get_float(const Json& j, std::string_view what, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_number())
    throw std::invalid_argument(std::string(what) + ": field \"" + key + "\": expected a number" +
                                (j.is_object() && j.contains(key) ? ", got " + j.at(key).dump()
                                                                  : std::string(" (missing)")));
  const double v = j.at(key).get<double>();
  if (!(std::fabs(v) <= static_cast<double>(std::numeric_limits<float>::max())))
    throw std::invalid_argument(std::string(what) + ": field \"" + key + "\": " + j.at(key).dump() +
                                " is outside the range of a float");
  return static_cast<float>(v);
}

}  // namespace mxmoe::json
