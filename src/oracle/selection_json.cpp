// Selection (and its parts) <-> JSON.
#include "mxmoe/no_backend_error.hpp"
#include "oracle/json_io.hpp"

namespace mxmoe {
namespace json_io {

using json::get;

Json rejection_to_json(const Rejection& r) {
  return Json{{"code", to_string(r.code)},
              {"detail", r.detail},
              {"required", r.required},
              {"actual", r.actual},
              {"remedy", r.remedy}};
}

Rejection rejection_from_json(const Json& j) {
  constexpr std::string_view what = "Rejection";
  json::expect_keys(j, what, {"code", "detail", "required", "actual", "remedy"});
  return Rejection{parse_reason_code(get<std::string>(j, what, "code")),
                   get<std::string>(j, what, "detail"), get<std::string>(j, what, "required"),
                   get<std::string>(j, what, "actual"), get<std::string>(j, what, "remedy")};
}

Json verdict_to_json(const Verdict& v) {
  Json reasons = Json::array();
  for (const Rejection& r : v.reasons) reasons.push_back(rejection_to_json(r));
  return Json{{"name", v.name},
              {"numerics_class", v.numerics_class},
              {"supported", v.supported},
              {"estimated_us", v.estimated_us},
              {"reasons", reasons}};
}

Verdict verdict_from_json(const Json& j) {
  constexpr std::string_view what = "Verdict";
  // numerics_class came later: a selection written before it still parses.
  json::expect_keys(j, what, {"name", "supported", "estimated_us", "reasons"}, {"numerics_class"});
  Verdict v;
  v.name = get<std::string>(j, what, "name");
  if (j.contains("numerics_class")) v.numerics_class = get<std::string>(j, what, "numerics_class");
  v.supported = get<bool>(j, what, "supported");
  v.estimated_us = get<double>(j, what, "estimated_us");
  if (!j.at("reasons").is_array())
    throw std::invalid_argument("Verdict.reasons: expected an array");
  for (const Json& r : j.at("reasons")) v.reasons.push_back(rejection_from_json(r));
  return v;
}

Json suggestion_to_json(const Suggestion& s) {
  return Json{{"change", s.change}, {"backend", s.backend}, {"text", s.text}};
}

Suggestion suggestion_from_json(const Json& j) {
  constexpr std::string_view what = "Suggestion";
  json::expect_keys(j, what, {"change", "backend", "text"});
  return Suggestion{get<std::string>(j, what, "change"), get<std::string>(j, what, "backend"),
                    get<std::string>(j, what, "text")};
}

Json selection_to_json(const Selection& s) {
  Json candidates = Json::array(), suggestions = Json::array();
  for (const Verdict& v : s.candidates) candidates.push_back(verdict_to_json(v));
  for (const Suggestion& g : s.suggestions) suggestions.push_back(suggestion_to_json(g));
  return Json{{"deployment", deployment_to_json(s.deployment)},
              {"preferences_source", s.preferences_source},
              {"candidates", candidates},
              {"chosen", s.chosen},
              {"why", s.why},
              {"suggestions", suggestions}};
}

Selection selection_from_json(const Json& j) {
  constexpr std::string_view what = "Selection";
  json::expect_keys(
      j, what, {"deployment", "preferences_source", "candidates", "chosen", "why", "suggestions"});
  Selection s;
  s.deployment = deployment_from_json(j.at("deployment"));
  s.preferences_source = get<std::string>(j, what, "preferences_source");
  if (!j.at("candidates").is_array() || !j.at("suggestions").is_array())
    throw std::invalid_argument("Selection: candidates and suggestions must be arrays");
  for (const Json& v : j.at("candidates")) s.candidates.push_back(verdict_from_json(v));
  s.chosen = get<std::string>(j, what, "chosen");
  s.why = get<std::string>(j, what, "why");
  for (const Json& g : j.at("suggestions")) s.suggestions.push_back(suggestion_from_json(g));
  return s;
}

}  // namespace json_io

std::string to_json(const Selection& s) {
  return json_io::selection_to_json(s).dump(2);
}

std::string explain_json(const Selection& s) {
  using json_io::Json;
  Json candidates = Json::array(), suggestions = Json::array();
  for (const Verdict& v : s.candidates) {
    Json reasons = Json::array();
    for (const Rejection& r : v.reasons) reasons.push_back(json_io::rejection_to_json(r));
    candidates.push_back({{"name", v.name},
                          {"supported", v.supported},
                          {"estimated_us", v.supported ? Json(v.estimated_us) : Json(nullptr)},
                          {"reasons", reasons}});
  }
  for (const Suggestion& g : s.suggestions) suggestions.push_back(json_io::suggestion_to_json(g));
  const bool none = s.chosen.empty();
  return Json{{"selected", none ? Json(nullptr) : Json(s.chosen)},
              {"why", none ? Json(nullptr) : Json(s.why)},
              {"preferences", s.preferences_source},
              {"deployment", json_io::deployment_to_json(s.deployment)},
              {"candidates", candidates},
              {"error", none ? Json(format_no_backend_message(s)) : Json(nullptr)},
              {"suggestions", suggestions}}
      .dump(2);
}

Selection selection_from_json(std::string_view text) {
  return json_io::selection_from_json(json::parse_strict(text, "Selection"));
}

}  // namespace mxmoe
