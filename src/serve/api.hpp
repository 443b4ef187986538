// The OpenAI API's requests as mxmoe reads them: /v1/completions and /v1/chat/completions
// bodies parsed and checked field by field (a field of the wrong type or out of range is an
// ApiError naming it; unknown fields are ignored, as OpenAI's server does), and the error
// object every failure answers with. Pure functions of the body: fuzzed (fuzz/fuzz_api.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/tokenizer.hpp"

namespace mxmoe::serve {

// A request the server refuses: the HTTP status, OpenAI's error type and the field at fault.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {},
           std::string type = "invalid_request_error")
      : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)),
        type_(std::move(type)) {}
  int status() const noexcept { return status_; }
  const std::string& param() const noexcept { return param_; }
  const std::string& type() const noexcept { return type_; }

 private:
  int status_;
  std::string param_, type_;
};

// OpenAI's error object: {"error": {"message", "type", "param", "code"}}.
std::string error_body(const ApiError& e);

enum class Endpoint { completions, chat };

// One prompt of a request: text (encoded with the model's tokenizer) or token ids.
struct Prompt {
  std::optional<std::string> text;
  std::vector<std::int32_t> ids;
};

struct GenerationRequest {
  Endpoint endpoint = Endpoint::completions;
  std::vector<Prompt> prompts;        // completions: one choice each
  std::vector<ChatMessage> messages;  // chat
  std::optional<int> max_tokens;      // absent: 16 (completions), the rest of the context (chat)
  float temperature = 1.0f;           // OpenAI's default
  float top_p = 1.0f;
  int top_k = 0;       // vLLM's extension; 0 or -1: all
  float min_p = 0.0f;  // vLLM's extension
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;  // stop strings (not in the answer)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int logprobs = -1;           // -1: none; N >= 0: the chosen token's and the N most likely
  bool ignore_eos = false;     // vLLM's extension
};

struct ApiLimits {
  std::size_t max_prompts = 64;        // prompts in one completions request
  std::size_t max_prompt_tokens = 1 << 20;  // ids in one prompt given as ids
  std::size_t max_messages = 1024;
  std::size_t max_stop = 16;
  std::size_t max_stop_bytes = 256;
};

// The body of POST /v1/completions or /v1/chat/completions. Throws ApiError (400) naming the
// field: not JSON (with the byte), nested too deep, a required field missing, a wrong type, a
// value out of range, or a feature mxmoe does not have (n > 1, echo, penalties, logit_bias).
GenerationRequest parse_request(Endpoint endpoint, std::string_view body, const ApiLimits& limits);

}  // namespace mxmoe::serve
