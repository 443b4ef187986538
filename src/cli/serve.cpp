// `mxmoe serve`: an OpenAI-compatible HTTP server on a whole model (src/serve/, docs/SERVE.md):
// /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics; continuous batching;
// with --batch-invariant, an answer does not depend on what else the server is doing.
#include <fmt/core.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "base/printable.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/llm_common.hpp"
#include "serve/server.hpp"

namespace mxmoe::cli {
namespace {

// A server's prompt chunk: half the library's 256, since a decoding sequence waits for every
// step that carries one. gpt-oss-20b compact at 16 clients (docs/PERFORMANCE.md): 128 kept the
// throughput of 256 (12.16 against 12.07 tok/s) and halved the inter-token p99 (2.0 s against
// 3.9 s); 64 lost 7% of it.
constexpr int kServePrefillChunk = 128;

GenerationFlags serve_generation_flags() {
  GenerationFlags g;
  g.prefill_chunk = kServePrefillChunk;
  return g;
}

struct ServeCommandOptions {
  GenerationFlags gen = serve_generation_flags();
  serve::ServerOptions server;
  int max_batch = 8;
  int max_context = 4096;
  int read_timeout = 30, write_timeout = 30, request_timeout = 600, shutdown_timeout = 10;
  std::size_t max_queue = 64;
  bool quiet = false;
};

int run_serve(ServeCommandOptions& o, CLI::App& app) {
  serve::ServerOptions& s = o.server;
  if (s.api_key.empty())
    if (const char* key = std::getenv("MXMOE_API_KEY")) s.api_key = key;
  if (s.model_name.empty()) s.model_name = o.gen.model;
  s.read_timeout = std::chrono::seconds(o.read_timeout);
  s.write_timeout = std::chrono::seconds(o.write_timeout);
  s.shutdown_timeout = std::chrono::seconds(o.shutdown_timeout);
  s.engine.request_timeout = std::chrono::seconds(o.request_timeout);
  s.engine.max_queue = o.max_queue;
  if (!o.quiet) s.log = [](const std::string& line) { print(stderr, "mxmoe serve: {}\n", line); };

  std::optional<Tokenizer> tokenizer = open_tokenizer(o.gen.model, false);
  const Request request = o.gen.request.resolve(app);
  Runtime runtime(request.threads);
  auto model = open_model(app, o.gen, runtime, o.max_batch, o.max_context, false);
  serve::serve(*model, tokenizer ? &*tokenizer : nullptr, s, [&](const std::string& host, int port) {
    print("mxmoe serve: listening on http://{}:{} ({} sequences at once, {} tokens each{}{})\n",
          host, port, o.max_batch, o.max_context, request.batch_invariant ? ", batch invariant" : "",
          s.api_key.empty() ? "" : ", API key required");
    std::fflush(stdout);
  });
  print(stderr, "mxmoe serve: stopped\n");
  return kExitOk;
}

}  // namespace

void add_serve(CLI::App& app, Action& action) {
  const auto [sub, o] = add_command<ServeCommandOptions>(
      app, action, "serve",
      "Serve a whole model over an OpenAI-compatible HTTP API, with continuous batching",
      run_serve);
  sub->add_option("--model", o->gen.model, "Checkpoint directory (config.json, safetensors, tokenizer.json)")
      ->required();
  sub->add_option("--host", o->server.host, "Address to listen on (default 127.0.0.1: this machine only)");
  sub->add_option("--port", o->server.port, "Port (default 8000; 0: a free one, printed)")
      ->check(CLI::Range(0, 65535));
  sub->add_option("--api-key", o->server.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/* and /metrics (or set MXMOE_API_KEY, "
                  "which keeps the key out of the process list)");
  sub->add_option("--served-model-name", o->server.model_name,
                  "The model's name in /v1/models and the answers (default: the --model path)");
  sub->add_option("--max-batch", o->max_batch, "Sequences generated at once (KV-cache slots), default 8")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--max-context", o->max_context,
                  "Tokens per sequence, prompt and answer (default 4096); the KV cache is allocated "
                  "for --max-batch x this")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--prefill-chunk", o->gen.prefill_chunk,
                  "Prompt tokens per step (default 128): long prompts are prefilled in chunks while "
                  "the other sequences keep decoding; smaller: shorter pauses between a stream's "
                  "tokens, slower prompts")
      ->check(CLI::Range(1, 1 << 16));
  sub->add_option("--max-queue", o->max_queue,
                  "Requests waiting for a slot (default 64); beyond it: 503 with Retry-After")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--max-connections", o->server.max_connections,
                  "Open connections (default 512); beyond it: 503 and closed")
      ->check(CLI::Range(1, 1 << 16));
  sub->add_option("--max-body", o->server.max_body, "Bytes of a request body (default 4194304): 413 beyond")
      ->check(CLI::Range(1024, 1 << 30));
  sub->add_option("--timeout", o->read_timeout,
                  "Seconds a request may take to arrive, and an idle connection may stay (default 30)")
      ->check(CLI::Range(1, 86400));
  sub->add_option("--write-timeout", o->write_timeout,
                  "Seconds a client may leave an answer unread before it is dropped (default 30)")
      ->check(CLI::Range(1, 86400));
  sub->add_option("--request-timeout", o->request_timeout,
                  "Seconds a request may queue and run (default 600): 504 beyond")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--shutdown-timeout", o->shutdown_timeout,
                  "Seconds SIGTERM lets in-flight requests finish before cancelling them (default 10)")
      ->check(CLI::Range(0, 3600));
  add_compact_flag(*sub, o->gen.compact);
  sub->add_flag("--quiet", o->quiet, "No line per request on stderr");
  o->gen.request.add(*sub, false);
  o->gen.hardware.add(*sub);
  sub->footer(
      "Endpoints: POST /v1/completions, POST /v1/chat/completions (stream, logprobs, stop, seed, "
      "usage), GET /v1/models, GET /health, GET /metrics (Prometheus). Requests join the running "
      "batch at token boundaries; with --batch-invariant a request's tokens and logprobs are "
      "bit-identical alone or among others. SIGTERM or Ctrl-C drains, then exits 0.\n"
      "Examples:\n"
      "  mxmoe serve --model /tmp/gpt-oss-20b --max-batch 16 --port 8000\n"
      "  curl -N localhost:8000/v1/completions -H 'Content-Type: application/json' \\\n"
      "       -d '{\"prompt\": \"Hello\", \"max_tokens\": 16, \"stream\": true}'\n"
      "  python -c \"import openai; c = openai.OpenAI(base_url='http://127.0.0.1:8000/v1', api_key='-'); "
      "print(c.completions.create(model='m', prompt='Hi').choices[0].text)\"");
}

}  // namespace mxmoe::cli
