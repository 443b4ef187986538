// libFuzzer: the replayable documents (a Deployment, a Selection, a Request, a LayerSpec, as
// `mxmoe explain` and the C API read them). The text is parsed once by the strict JSON dialect
// (what every public *_from_json(text) does first), then given to each document's reader:
// each must accept or raise std::invalid_argument; an accepted document round-trips
// unchanged through the public text functions, and an accepted Deployment is judged by every
// registered backend's check() without any other exception, crash or sanitizer report.
// (A round trip that throws escapes the harness: a crash.)
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "backends/registry.hpp"
#include "base/json.hpp"
#include "mxmoe/oracle.hpp"
#include "oracle/json_io.hpp"

namespace {

// READ(j), or std::nullopt when it refuses the document with std::invalid_argument.
template <class Read>
auto accepted(Read read, const mxmoe::json::Json& j) -> std::optional<decltype(read(j))> {
  try {
    return read(j);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using mxmoe::json::Json;
  std::string error;
  const std::optional<Json> j =
      mxmoe::json::try_parse_strict(std::string_view(reinterpret_cast<const char*>(data), size),
                                    mxmoe::json::kDefaultMaxDepth, error);
  if (!j) return 0;
  namespace io = mxmoe::json_io;

  if (const auto d = accepted([](const Json& x) { return io::deployment_from_json(x); }, *j)) {
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
  if (const auto s = accepted([](const Json& x) { return io::selection_from_json(x); }, *j))
    if (!(mxmoe::selection_from_json(mxmoe::to_json(*s)) == *s)) std::abort();
  if (const auto r = accepted([](const Json& x) { return io::request_from_json(x); }, *j))
    if (!(mxmoe::request_from_json(mxmoe::to_json(*r)) == *r)) std::abort();
  if (const auto l = accepted([](const Json& x) { return io::layer_spec_from_json(x); }, *j))
    if (!(mxmoe::layer_spec_from_json(mxmoe::to_json(*l)) == *l)) std::abort();
  return 0;
}
