// libFuzzer: the replayable documents (a Deployment, a Selection, a Request, a LayerSpec, as
// `mxmoe explain` and the C API read them). Each parser must accept or raise
// std::invalid_argument; an accepted document round-trips unchanged, and an accepted
// Deployment is judged by every registered backend's check() without any other exception,
// crash or sanitizer report. (A round trip that throws escapes the harness: a crash.)
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "mxmoe/oracle.hpp"

namespace {

// PARSE(text), or std::nullopt when it refuses the text with std::invalid_argument.
template <class Parse>
auto accepted(Parse parse, std::string_view text) -> std::optional<decltype(parse(text))> {
  try {
    return parse(text);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto deployment = [](std::string_view t) { return mxmoe::deployment_from_json(t); };
  const auto selection = [](std::string_view t) { return mxmoe::selection_from_json(t); };
  const auto request = [](std::string_view t) { return mxmoe::request_from_json(t); };
  const auto layer = [](std::string_view t) { return mxmoe::layer_spec_from_json(t); };

  if (const auto d = accepted(deployment, text)) {
    if (!(mxmoe::deployment_from_json(mxmoe::to_json(*d)) == *d)) std::abort();
    std::optional<mxmoe::Selection> s;
    try {
      s = mxmoe::judge(*d, mxmoe::preferences_for(d->layer.family));
    } catch (const std::invalid_argument&) {
      // an unknown forced or excluded backend name: the documented refusal
    }
    if (s) {
      if (s->candidates.size() != mxmoe::registered_backends().size()) std::abort();
      if (!(mxmoe::selection_from_json(mxmoe::to_json(*s)) == *s)) std::abort();
    }
  }
  if (const auto s = accepted(selection, text))
    if (!(mxmoe::selection_from_json(mxmoe::to_json(*s)) == *s)) std::abort();
  if (const auto r = accepted(request, text))
    if (!(mxmoe::request_from_json(mxmoe::to_json(*r)) == *r)) std::abort();
  if (const auto l = accepted(layer, text))
    if (!(mxmoe::layer_spec_from_json(mxmoe::to_json(*l)) == *l)) std::abort();
  return 0;
}
