// Request / Deployment <-> JSON.
#include "contract/deployment_json.hpp"
#include "mxmoe/deployment.hpp"

namespace mxmoe {
namespace {

using json::get;

}  // namespace

namespace json_io {

Json request_to_json(const Request& r) {
  return Json{{"activation", r.activation ? Json(to_string(*r.activation)) : Json(nullptr)},
              {"batch_invariant", r.batch_invariant},
              {"ep_size", r.ep_size},
              {"ep_rank", r.ep_rank},
              {"placement", r.placement},
              {"threads", r.threads},
              {"tokens_hint", r.tokens_hint},
              {"forced_backend", r.forced_backend},
              {"excluded_backends", r.excluded_backends},
              {"allow_reference", r.allow_reference}};
}

Request request_from_json(const Json& j) {
  constexpr std::string_view what = "Request";
  // allow_reference and placement came later: requests written before them still parse.
  // allow_judge_only is allow_reference's former key (docs/REASON_CODES.md).
  json::expect_keys(j, what,
                    {"activation", "batch_invariant", "ep_size", "ep_rank", "threads",
                     "tokens_hint", "forced_backend", "excluded_backends"},
                    {"allow_reference", "allow_judge_only", "placement"});
  Request r;
  if (j.contains("allow_reference") && j.contains("allow_judge_only"))
    throw std::invalid_argument(
        "Request: both allow_reference and its former key allow_judge_only are given; keep one");
  for (const char* key : {"allow_reference", "allow_judge_only"})
    if (j.contains(key)) r.allow_reference = get<bool>(j, what, key);
  if (!j.at("activation").is_null())
    r.activation = parse_activation_format(get<std::string>(j, what, "activation"));
  r.batch_invariant = get<bool>(j, what, "batch_invariant");
  r.ep_size = static_cast<int>(json::get_integer(j, what, "ep_size", 1, kMaxExperts));
  r.ep_rank = static_cast<int>(json::get_integer(j, what, "ep_rank", 0, kMaxExperts - 1));
  r.threads = static_cast<int>(json::get_integer(j, what, "threads", 0, kMaxThreads));
  r.tokens_hint = static_cast<int>(json::get_integer(j, what, "tokens_hint", 1, kMaxTokensPerCall));
  if (j.contains("placement")) {
    for (const std::int64_t owner :
         json::get_integer_array(j, what, "placement", 0, kMaxExperts - 1, kMaxExperts))
      r.placement.push_back(static_cast<int>(owner));
  }
  r.forced_backend = get<std::string>(j, what, "forced_backend");
  r.excluded_backends = get<std::vector<std::string>>(j, what, "excluded_backends");
  return r;
}

Json deployment_to_json(const Deployment& d) {
  return Json{{"layer", layer_spec_to_json(d.layer)},
              {"hardware", hardware_to_json(d.hardware)},
              {"request", request_to_json(d.request)}};
}

Deployment deployment_from_json(const Json& j) {
  json::expect_keys(j, "Deployment", {"layer", "hardware", "request"});
  return Deployment{layer_spec_from_json(j.at("layer")), hardware_from_json(j.at("hardware")),
                    request_from_json(j.at("request"))};
}

}  // namespace json_io

std::string to_json(const Request& r) {
  return json_io::request_to_json(r).dump(2);
}
Request request_from_json(std::string_view text) {
  return json_io::request_from_json(json::parse_strict(text, "Request"));
}
std::string to_json(const Deployment& d) {
  return json_io::deployment_to_json(d).dump(2);
}
Deployment deployment_from_json(std::string_view text) {
  return json_io::deployment_from_json(json::parse_strict(text, "Deployment"));
}

}  // namespace mxmoe
