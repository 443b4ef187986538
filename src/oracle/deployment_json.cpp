// Activation format names, and Request / Deployment <-> JSON.
#include <array>

#include "base/enum_names.hpp"
#include "mxmoe/deployment.hpp"
#include "oracle/json_io.hpp"

namespace mxmoe {
namespace {

constexpr std::array<std::string_view, 4> kActivationFormatNames = {"f32", "bf16", "int8", "mxfp8"};
using json::get;

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
              {"excluded_backends", r.excluded_backends}};
}

Request request_from_json(const Json& j) {
  constexpr std::string_view what = "Request";
  json::expect_keys(j, what,
                    {"activation", "batch_invariant", "ep_size", "ep_rank", "placement", "threads",
                     "tokens_hint", "forced_backend", "excluded_backends"});
  Request r;
  if (!j.at("activation").is_null())
    r.activation = parse_activation_format(get<std::string>(j, what, "activation"));
  r.batch_invariant = get<bool>(j, what, "batch_invariant");
  r.ep_size = get<int>(j, what, "ep_size");
  r.ep_rank = get<int>(j, what, "ep_rank");
  r.placement = get<std::vector<int>>(j, what, "placement");
  r.threads = get<int>(j, what, "threads");
  r.tokens_hint = get<int>(j, what, "tokens_hint");
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
