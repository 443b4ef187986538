// `mxmoe serve`: an OpenAI-compatible HTTP server on one LanguageModel (docs/SERVE.md).
// HTTP/1.1 with keep-alive and server-sent events from Boost.Beast on one I/O thread; the
// model on the engine's thread (continuous batching). Every bound is an option: connections,
// body size, the time a request may take to arrive (a slow client is cut off), the time a
// write may wait, the queue, the time a request may run, the time SIGTERM waits.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

#include "mxmoe/llm.hpp"
#include "mxmoe/tokenizer.hpp"
#include "serve/api.hpp"
#include "serve/engine.hpp"

namespace mxmoe::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                 // 0: a free port (the one taken is reported)
  std::string api_key;             // non-empty: /v1/* and /metrics need "Authorization: Bearer KEY"
  std::string model_name;          // what /v1/models lists and the answers name
  std::size_t max_body = 4u << 20;           // bytes of a request body
  std::size_t max_connections = 512;         // open at once; more are answered 503 and closed
  std::chrono::seconds read_timeout{30};     // a request's head and body must arrive within it;
                                             // also how long an idle keep-alive connection stays
  std::chrono::seconds write_timeout{30};    // a client that reads nothing for this long is dropped
  std::chrono::seconds shutdown_timeout{10}; // SIGTERM: in-flight requests may finish within it
  EngineOptions engine;
  ApiLimits limits;
  std::function<void(const std::string&)> log;  // one line per request (untrusted text escaped)
};

// Serves MODEL until SIGINT or SIGTERM, then drains (bounded by shutdown_timeout) and returns.
// ON_LISTENING gets the bound address once the socket listens. TOKENIZER may be null (prompts
// as ids only). Throws std::runtime_error when the address cannot be bound.
void serve(LanguageModel& model, const Tokenizer* tokenizer, const ServerOptions& options,
           const std::function<void(const std::string& host, int port)>& on_listening);

}  // namespace mxmoe::serve
