// libFuzzer: the bodies of `mxmoe serve`'s /v1/completions and /v1/chat/completions (the first
// byte picks the endpoint). Every input must parse or raise ApiError with a 4xx status; an
// accepted request must hold values in the documented ranges.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve/api.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  using mxmoe::serve::Endpoint;
  const Endpoint endpoint = data[0] & 1 ? Endpoint::chat : Endpoint::completions;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  mxmoe::serve::ApiLimits limits;
  try {
    const auto r = mxmoe::serve::parse_request(endpoint, body, limits);
    if (endpoint == Endpoint::completions && (r.prompts.empty() || r.prompts.size() > limits.max_prompts))
      std::abort();
    if (endpoint == Endpoint::chat && (r.messages.empty() || r.messages.size() > limits.max_messages))
      std::abort();
    for (const auto& p : r.prompts)
      for (std::int32_t id : p.ids)
        if (id < 0) std::abort();
    if (r.max_tokens && *r.max_tokens < 1) std::abort();
    if (!(r.temperature >= 0.0f && r.temperature <= 2.0f) || !(r.top_p > 0.0f && r.top_p <= 1.0f))
      std::abort();
    if (r.logprobs < -1 || r.logprobs > 20 || r.stop.size() > limits.max_stop) std::abort();
    if (r.include_usage && !r.stream) std::abort();
  } catch (const mxmoe::serve::ApiError& e) {
    if (e.status() < 400 || e.status() > 499) std::abort();
  }
  return 0;
}
