// The HTTP side of `mxmoe serve` (server.hpp): Boost.Beast sessions on one I/O thread.
#include "serve/server.hpp"

#include <fmt/core.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <iterator>
#include <memory>
#include <optional>

#include "base/json.hpp"
#include "base/printable.hpp"

namespace mxmoe::serve {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using json::Json;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxHeaderBytes = 16 * 1024;
// The read buffer: the parser needs a request's head, a chunk's head (with its extensions) and
// the trailers whole in it, which Beast bounds only by the buffer; a body passes through it.
constexpr std::size_t kMaxReadBuffer = 256 * 1024;
constexpr std::size_t kMaxUnsentBytes = 8u << 20;  // a stream's client that stopped reading

std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool same_secret(std::string_view a, std::string_view b) {
  // Constant time in the key's contents (its length is not secret: headers are bounded).
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff = static_cast<unsigned char>(diff | (a[i] ^ (i < b.size() ? b[i] : 0)));
  return diff == 0;
}

struct Shared;  // what every session sees

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Shared& shared);
  ~Session();
  void start() { read(); }

 private:
  struct Choice {
    std::shared_ptr<Job> job;
    std::string text;
    std::vector<GeneratedToken> tokens;
    std::size_t prompt_tokens = 0, completion_tokens = 0;
    std::string finish, error;
    bool timeout = false;   // the error is --request-timeout's
    bool shutdown = false;  // the error is the server's shutdown's
  };

  void read();
  void on_header(beast::error_code ec);
  void read_body();
  void on_read(beast::error_code ec);
  void handle();
  void respond(http::status status, std::string body, std::string_view type = "application/json",
               bool retry_after = false);
  void fail(const ApiError& e) { respond(static_cast<http::status>(e.status()), error_body(e)); }
  void after_write(bool keep_alive);
  void linger();
  void discard();
  void close();
  void generate(Endpoint endpoint);
  void watch_disconnect();
  void on_update(std::size_t index, JobUpdate&& u);
  void cancel_jobs();
  void end_generation();
  void finish_generation();
  // A choice that ended in an error, as the client is told: 504 for --request-timeout, 503
  // for the server's shutdown, else 500.
  static ApiError failure_of(const Choice& c);
  Json logprobs_json(std::span<const GeneratedToken> tokens, std::size_t offset) const;
  std::string chunk(std::size_t index, const std::string& text, std::span<const GeneratedToken> tokens,
                    const std::string& finish, std::size_t offset) const;
  void send(std::string data);
  void flush();

  beast::tcp_stream stream_;
  Shared& shared_;
  beast::flat_buffer buffer_{kMaxReadBuffer};
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  Clock::time_point started_;
  std::string endpoint_name_;
  bool keep_alive_ = true;
  bool refused_ = false;  // the request was refused before it was read whole
  bool closed_ = false;

  // The generation in progress (one request at a time per connection).
  std::shared_ptr<Session> self_;  // alive while it generates
  std::uint64_t generation_ = 0;   // numbers generations, so a stale callback is known
  bool generating_ = false, streaming_ = false, header_sent_ = false, writing_ = false;
  bool chunked_ = true;  // a stream's framing: HTTP/1.0 has no chunks, its body ends at the close
  GenerationRequest request_fields_;
  std::vector<Choice> choices_;
  std::size_t finished_ = 0;
  std::string id_;
  std::int64_t created_ = 0;
  std::string out_, wbuf_;
  std::unique_ptr<http::response<http::empty_body>> stream_head_;
  std::unique_ptr<http::response_serializer<http::empty_body>> stream_serializer_;
  std::shared_ptr<void> response_;  // the response being written
};

struct Shared {
  net::io_context& io;
  LanguageModel& model;
  const Tokenizer* tokenizer;
  const ServerOptions& options;
  Metrics& metrics;
  Engine& engine;
  std::size_t connections = 0;
  std::uint64_t next_id = 0;
  std::uint64_t seeds = 0x6d786d6f65;  // requests without a seed get distinct ones
  bool draining = false;
  std::size_t generating = 0;  // sessions with a generation in progress
  std::size_t writes = 0;      // writes in flight (a drain waits for them)

  void log(const std::string& line) const {
    if (options.log) options.log(line);
  }
};

Session::Session(tcp::socket socket, Shared& shared) : stream_(std::move(socket)), shared_(shared) {
  ++shared_.connections;
  shared_.metrics.connections(1);
}

Session::~Session() {
  // A session closed mid-generation (its client left) is destroyed before its jobs' last
  // updates arrive: its generation ends here, or a drain would wait for it to its bound.
  cancel_jobs();
  end_generation();
  --shared_.connections;
  shared_.metrics.connections(-1);
}

void Session::read() {
  request_ = {};
  parser_.emplace();
  parser_->header_limit(kMaxHeaderBytes);
  parser_->body_limit(shared_.options.max_body);
  // The whole request (or a keep-alive connection's idle time) within read_timeout: a client
  // that sends a byte a second is cut off.
  stream_.expires_after(shared_.options.read_timeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
}

void Session::on_header(beast::error_code ec) {
  // A client that sent "Expect: 100-continue" waits for it before its body (curl does, for a
  // large body: a second each request otherwise). A body over the limit was refused already.
  if (!ec && !parser_->is_done() && parser_->get().version() >= 11 &&
      beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
    static const std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                     [self = shared_from_this()](beast::error_code e, std::size_t) {
                       if (e) return self->close();
                       self->read_body();
                     });
    return;
  }
  if (ec) return on_read(ec);
  read_body();
}

void Session::read_body() {
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
}

void Session::on_read(beast::error_code ec) {
  started_ = Clock::now();
  if (ec == http::error::body_limit) {
    keep_alive_ = false;
    refused_ = true;
    endpoint_name_ = "other";
    return fail(ApiError(413, fmt::format("the body exceeds {} bytes (--max-body)", shared_.options.max_body)));
  }
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    keep_alive_ = false;
    refused_ = true;
    endpoint_name_ = "other";
    return fail(ApiError(431, "the request's header, a chunk's header or its trailers are too large"));
  }
  if (ec) {
    // The client closed, went silent past the timeout, or sent what is not HTTP: nothing to
    // answer that it would read.
    if (ec != http::error::end_of_stream && ec != beast::error::timeout &&
        ec != net::error::operation_aborted && ec != net::error::eof &&
        ec != net::error::connection_reset && ec.category() == http::make_error_code(http::error::bad_version).category()) {
      keep_alive_ = false;
      refused_ = true;
      endpoint_name_ = "other";
      return fail(ApiError(400, "malformed HTTP request: " + ec.message()));
    }
    return close();
  }
  request_ = parser_->release();
  keep_alive_ = request_.keep_alive() && !shared_.draining;
  stream_.expires_never();
  handle();
}

void Session::handle() {
  const std::string target(request_.target());
  const std::string path = target.substr(0, target.find('?'));
  const auto method = request_.method();
  endpoint_name_ = path == "/health" || path == "/metrics" || path == "/v1/models" ||
                           path == "/v1/completions" || path == "/v1/chat/completions"
                       ? path
                       : "other";
  // A transfer coding the parser did not undo (it undoes chunked only): the body as read is
  // not the body sent, so 501 (RFC 9112, 6.1) rather than a misleading JSON error.
  if (const auto te = request_[http::field::transfer_encoding]; !te.empty()) {
    const http::token_list codings{te};  // Beast's reading of the header's list
    const auto n = std::distance(codings.begin(), codings.end());
    if (n != 1 || !beast::iequals(*codings.begin(), "chunked")) {
      keep_alive_ = false;
      return fail(ApiError(501, fmt::format("Transfer-Encoding \"{}\" is not supported (only chunked)",
                                            printable_ascii(std::string_view(te).substr(0, 64)))));
    }
  }
  if (!shared_.options.api_key.empty() && path != "/health") {
    // "Bearer" in any case (RFC 9110, 11.1: the scheme is case-insensitive), then the key.
    const auto auth = request_[http::field::authorization];
    const std::string_view scheme = "bearer ";
    if (auth.size() < scheme.size() || !beast::iequals(auth.substr(0, scheme.size()), scheme) ||
        !same_secret(auth.substr(scheme.size()), shared_.options.api_key))
      return fail(ApiError(401, "a valid API key is required (Authorization: Bearer KEY)", {},
                           "authentication_error"));
  }
  auto only = [&](http::verb verb) {
    if (method == verb) return true;
    fail(ApiError(405, fmt::format("{} takes {} only", path, std::string(http::to_string(verb)))));
    return false;
  };
  if (path == "/health") {
    if (only(http::verb::get)) respond(http::status::ok, R"({"status":"ok"})");
  } else if (path == "/metrics") {
    if (only(http::verb::get))
      respond(http::status::ok, shared_.metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  } else if (path == "/v1/models") {
    if (only(http::verb::get)) {
      Json m = {{"id", shared_.options.model_name}, {"object", "model"}, {"created", 0},
                {"owned_by", "mxmoe"}, {"max_model_len", shared_.model.max_context()}};
      respond(http::status::ok, dump(Json{{"object", "list"}, {"data", Json::array({m})}}));
    }
  } else if (path == "/v1/completions") {
    if (only(http::verb::post)) generate(Endpoint::completions);
  } else if (path == "/v1/chat/completions") {
    if (only(http::verb::post)) generate(Endpoint::chat);
  } else {
    fail(ApiError(404, fmt::format("no such endpoint: {}", printable(path.substr(0, 200)))));
  }
}

void Session::respond(http::status status, std::string body, std::string_view type, bool retry_after) {
  auto res = std::make_shared<http::response<http::string_body>>(status, request_.version() ? request_.version() : 11);
  res->set(http::field::server, "mxmoe");
  res->set(http::field::content_type, type);
  if (retry_after) res->set(http::field::retry_after, "1");
  res->keep_alive(keep_alive_);
  res->body() = std::move(body);
  res->prepare_payload();
  shared_.metrics.request(endpoint_name_, static_cast<int>(status));
  shared_.log(fmt::format("{} {} {} {:.3f}s", std::string(http::to_string(request_.method())),
                          printable_ascii(std::string(request_.target()).substr(0, 200)),
                          static_cast<int>(status),
                          std::chrono::duration<double>(Clock::now() - started_).count()));
  response_ = res;
  stream_.expires_after(shared_.options.write_timeout);
  ++shared_.writes;
  http::async_write(stream_, *res, [self = shared_from_this(), keep = keep_alive_](beast::error_code ec, std::size_t) {
    --self->shared_.writes;
    self->response_.reset();
    if (ec) return self->close();
    self->after_write(keep);
  });
}

void Session::after_write(bool keep_alive) {
  if (refused_) return linger();
  if (keep_alive && !shared_.draining) return read();
  close();
}

void Session::linger() {
  // The client may still be sending what was refused (a body over the limit): closing with it
  // unread would reset the connection, and a client that sends its whole body before it reads
  // (Python's http.client, httpx) would see the reset, not the answer. So the rest is read and
  // dropped until the client closes, within the read timeout.
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.expires_after(shared_.options.read_timeout);
  buffer_.consume(buffer_.size());
  discard();
}

void Session::discard() {
  stream_.async_read_some(buffer_.prepare(64 * 1024), [self = shared_from_this()](beast::error_code ec, std::size_t) {
    if (ec) return self->close();
    self->discard();
  });
}

void Session::close() {
  closed_ = true;
  cancel_jobs();
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
  self_.reset();  // may destroy this session: nothing after
}

void Session::cancel_jobs() {
  if (!generating_) return;
  for (auto& c : choices_)
    if (c.job && c.finish.empty()) shared_.engine.cancel(*c.job);
}

void Session::end_generation() {
  if (!generating_) return;
  generating_ = false;
  --shared_.generating;
}

// ---- generation --------------------------------------------------------------------------

void Session::generate(Endpoint endpoint) {
  if (shared_.draining) return fail(ApiError(503, "the server is shutting down", {}, "server_error"));
  try {
    request_fields_ = parse_request(endpoint, request_.body(), shared_.options.limits);
  } catch (const ApiError& e) {
    return fail(e);
  }
  GenerationRequest& r = request_fields_;
  const Tokenizer* tok = shared_.tokenizer;
  // The prompts as ids.
  std::vector<std::vector<std::int32_t>> prompts;
  try {
    if (endpoint == Endpoint::chat) {
      if (!tok) throw ApiError(400, "this model has no usable tokenizer.json: chat needs one", "messages");
      std::string text;
      try {
        text = render_chat(shared_.model.family(), r.messages);
      } catch (const std::invalid_argument& e) {
        throw ApiError(400, e.what(), "messages");
      }
      prompts.push_back(tok->encode(text, true));
    } else {
      for (const Prompt& p : r.prompts) {
        if (p.text) {
          if (!tok) throw ApiError(400, "this model has no usable tokenizer.json: give the prompt as token ids", "prompt");
          // Special tokens written in the text are parsed, as `mxmoe complete` and vLLM do.
          prompts.push_back(tok->encode(*p.text, true));
        } else {
          prompts.push_back(p.ids);
        }
      }
    }
  } catch (const std::invalid_argument& e) {  // text that is not UTF-8
    return fail(ApiError(400, e.what(), endpoint == Endpoint::chat ? "messages" : "prompt"));
  } catch (const ApiError& e) {
    return fail(e);
  }
  // Submitted all or none: more prompts than the queue holds would be refused forever, and a
  // 503's Retry-After would have the client retry for nothing.
  if (prompts.size() > shared_.options.engine.max_queue)
    return fail(ApiError(400, fmt::format("{} prompts exceed the queue's {} (--max-queue)", prompts.size(),
                                          shared_.options.engine.max_queue), "prompt"));
  const int vocab = shared_.model.vocab_size();
  const int context = shared_.model.max_context();
  std::vector<std::shared_ptr<Job>> jobs;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    if (p.empty()) return fail(ApiError(400, "the prompt is empty", "prompt"));
    for (std::int32_t t : p)
      if (t < 0 || t >= vocab)
        return fail(ApiError(400, fmt::format("token id {} is outside the vocabulary [0, {})", t, vocab), "prompt"));
    const auto length = static_cast<std::int64_t>(p.size());
    if (length >= context)
      return fail(ApiError(400, fmt::format("the prompt has {} tokens; the context is {} (--max-context)", length, context),
                           endpoint == Endpoint::chat ? "messages" : "prompt"));
    const int max_tokens = r.max_tokens ? *r.max_tokens
                                        : endpoint == Endpoint::completions ? 16 : static_cast<int>(context - length);
    if (length + max_tokens > context)
      return fail(ApiError(400, fmt::format("{} prompt tokens + max_tokens {} exceed the context of {} tokens (--max-context)",
                                            length, max_tokens, context), "max_tokens"));
    auto job = std::make_shared<Job>();
    job->prompt = p;
    job->params.max_tokens = max_tokens;
    job->params.temperature = r.temperature;
    job->params.top_p = r.top_p;
    job->params.top_k = r.top_k;
    job->params.min_p = r.min_p;
    job->params.seed = r.seed ? *r.seed : shared_.seeds++;
    job->params.ignore_eos = r.ignore_eos;
    job->stop = r.stop;
    job->logprobs = r.logprobs;
    jobs.push_back(std::move(job));
  }
  choices_.clear();
  choices_.resize(jobs.size());
  finished_ = 0;
  ++generation_;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    choices_[i].job = jobs[i];
    choices_[i].prompt_tokens = jobs[i]->prompt.size();
    std::weak_ptr<Session> weak = weak_from_this();
    net::io_context& io = shared_.io;
    const std::uint64_t gen = generation_;
    jobs[i]->sink = [weak, &io, i, gen](JobUpdate&& u) {
      net::post(io, [weak, i, gen, u = std::move(u)]() mutable {
        if (auto s = weak.lock(); s && s->generating_ && s->generation_ == gen) s->on_update(i, std::move(u));
      });
    };
  }
  if (!shared_.engine.submit(jobs))
    return respond(http::status::service_unavailable,
                   error_body(ApiError(503, "the queue is full; retry later", {}, "server_error")),
                   "application/json", true);
  generating_ = true;
  ++shared_.generating;
  self_ = shared_from_this();
  streaming_ = r.stream;
  header_sent_ = false;
  id_ = fmt::format("{}-{}", endpoint == Endpoint::chat ? "chatcmpl" : "cmpl", shared_.next_id++);
  created_ = std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch()).count();
  watch_disconnect();
  if (streaming_) {
    stream_head_ = std::make_unique<http::response<http::empty_body>>(http::status::ok, request_.version());
    stream_head_->set(http::field::server, "mxmoe");
    stream_head_->set(http::field::content_type, "text/event-stream");
    stream_head_->set(http::field::cache_control, "no-cache");
    chunked_ = request_.version() >= 11;
    if (!chunked_) keep_alive_ = false;
    stream_head_->keep_alive(keep_alive_);
    stream_head_->chunked(chunked_);
    stream_serializer_ = std::make_unique<http::response_serializer<http::empty_body>>(*stream_head_);
    writing_ = true;
    stream_.expires_after(shared_.options.write_timeout);
    ++shared_.writes;
    http::async_write_header(stream_, *stream_serializer_,
                             [self = shared_from_this()](beast::error_code ec, std::size_t) {
                               --self->shared_.writes;
                               self->writing_ = false;
                               self->stream_.expires_never();
                               if (ec) return self->close();
                               self->header_sent_ = true;
                               self->flush();
                             });
    if (endpoint == Endpoint::chat) {
      Json delta = {{"role", "assistant"}, {"content", ""}};
      Json c = {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_},
                {"model", shared_.options.model_name},
                {"choices", Json::array({{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}}})}};
      out_ += "data: " + dump(c) + "\n\n";
    }
  }
}

void Session::watch_disconnect() {
  // Readable while generating: the client closed (or sent its next request early, which is
  // then read as usual). A closed client's sequences are cancelled at once.
  stream_.socket().async_wait(tcp::socket::wait_read,
                              [self = shared_from_this(), gen = generation_](beast::error_code ec) {
                                if (!self->generating_ || self->generation_ != gen) return;
                                beast::error_code e2;
                                const std::size_t n = self->stream_.socket().available(e2);
                                if (ec || e2 || n == 0) self->close();
                              });
}

Json Session::logprobs_json(std::span<const GeneratedToken> tokens, std::size_t offset) const {
  const Tokenizer* tok = shared_.tokenizer;
  auto text_of = [&](std::int32_t id) {
    return tok ? tok->decode(std::span<const std::int32_t>(&id, 1), false) : fmt::format("token_id:{}", id);
  };
  auto bytes_of = [](const std::string& s) {
    Json b = Json::array();
    for (char ch : s) b.push_back(static_cast<unsigned char>(ch));
    return b;
  };
  if (request_fields_.endpoint == Endpoint::chat) {
    Json content = Json::array();
    for (const auto& t : tokens) {
      const std::string s = text_of(t.id);
      Json top = Json::array();
      for (const auto& o : t.top) {
        const std::string ts = text_of(o.token);
        top.push_back({{"token", ts}, {"logprob", o.logprob}, {"bytes", bytes_of(ts)}});
      }
      content.push_back({{"token", s}, {"logprob", t.logprob}, {"bytes", bytes_of(s)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  Json toks = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  std::size_t at = offset;
  for (const auto& t : tokens) {
    const std::string s = text_of(t.id);
    toks.push_back(s);
    lps.push_back(t.logprob);
    Json top = Json::object();
    for (const auto& o : t.top) top[text_of(o.token)] = o.logprob;
    tops.push_back(top);
    offsets.push_back(at);
    at += s.size();
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

std::string Session::chunk(std::size_t index, const std::string& text, std::span<const GeneratedToken> tokens,
                           const std::string& finish, std::size_t offset) const {
  const bool chat = request_fields_.endpoint == Endpoint::chat;
  const Json lp = request_fields_.logprobs >= 0 ? logprobs_json(tokens, offset) : Json(nullptr);
  const Json reason = finish.empty() ? Json(nullptr) : Json(finish);
  Json choice;
  if (chat) {
    Json delta = Json::object();
    if (!text.empty()) delta["content"] = text;
    choice = {{"index", index}, {"delta", delta}, {"logprobs", lp}, {"finish_reason", reason}};
  } else {
    choice = {{"index", index}, {"text", text}, {"logprobs", lp}, {"finish_reason", reason}};
  }
  Json c = {{"id", id_}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
            {"model", shared_.options.model_name}, {"choices", Json::array({choice})}};
  if (request_fields_.include_usage) c["usage"] = nullptr;
  return "data: " + dump(c) + "\n\n";
}

void Session::on_update(std::size_t index, JobUpdate&& u) {
  Choice& c = choices_[index];
  const std::size_t offset = c.text.size();
  if (streaming_ && u.finish != "error" && u.finish != "cancelled" &&
      (!u.text.empty() || !u.tokens.empty() || !u.finish.empty()))
    send(chunk(index, u.text, u.tokens, u.finish, offset));
  c.text += u.text;
  if (!streaming_) c.tokens.insert(c.tokens.end(), u.tokens.begin(), u.tokens.end());
  if (u.finish.empty()) return;
  c.finish = u.finish;
  c.error = u.error;
  c.timeout = u.timeout;
  c.shutdown = u.shutdown;
  c.completion_tokens = u.completion_tokens;
  c.prompt_tokens = u.prompt_tokens;
  if (streaming_ && u.finish == "error") send("data: " + error_body(failure_of(c)) + "\n\n");
  if (++finished_ == choices_.size()) finish_generation();
}

ApiError Session::failure_of(const Choice& c) {
  if (c.timeout) return ApiError(504, c.error, "", "timeout");
  if (c.shutdown) return ApiError(503, c.error, "", "server_error");
  return ApiError(500, c.error, "", "server_error");
}

void Session::finish_generation() {
  std::size_t prompt = 0, completion = 0;
  bool cancelled = false;
  std::optional<ApiError> failure;
  for (const auto& c : choices_) {
    prompt += c.prompt_tokens;
    completion += c.completion_tokens;
    cancelled = cancelled || c.finish == "cancelled";
    if (c.finish == "error" && !failure) failure.emplace(failure_of(c));
  }
  const Json usage = {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  end_generation();
  std::shared_ptr<Session> self = std::move(self_);  // this session lives to the end of this call
  // The client is gone, or the server stops. A closed session is not kept for its last chunk:
  // a stream whose head failed to go out would keep itself forever.
  if (closed_ || (cancelled && !failure)) return close();
  if (streaming_) {
    if (request_fields_.include_usage) {
      Json c = {{"id", id_}, {"object", request_fields_.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_}, {"model", shared_.options.model_name}, {"choices", Json::array()}, {"usage", usage}};
      send("data: " + dump(c) + "\n\n");
    }
    send("data: [DONE]\n\n");
    shared_.metrics.request(endpoint_name_, 200);
    shared_.log(fmt::format("POST {} 200 (stream) {:.3f}s", endpoint_name_,
                            std::chrono::duration<double>(Clock::now() - started_).count()));
    self_ = self;  // until the last chunk is written
    return flush();
  }
  if (failure) return fail(*failure);
  Json choices = Json::array();
  for (std::size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    const Json lp = request_fields_.logprobs >= 0 ? logprobs_json(c.tokens, 0) : Json(nullptr);
    if (request_fields_.endpoint == Endpoint::chat)
      choices.push_back({{"index", i}, {"message", {{"role", "assistant"}, {"content", c.text}}},
                         {"logprobs", lp}, {"finish_reason", c.finish}});
    else
      choices.push_back({{"index", i}, {"text", c.text}, {"logprobs", lp}, {"finish_reason", c.finish}});
  }
  Json body = {{"id", id_},
               {"object", request_fields_.endpoint == Endpoint::chat ? "chat.completion" : "text_completion"},
               {"created", created_}, {"model", shared_.options.model_name}, {"choices", choices}, {"usage", usage}};
  respond(http::status::ok, dump(body));
}

void Session::send(std::string data) {
  out_ += data;
  if (out_.size() > kMaxUnsentBytes) return close();  // the client stopped reading
  flush();
}

void Session::flush() {
  if (!header_sent_ || writing_) return;
  if (out_.empty()) {
    if (generating_ || !self_) return;
    if (!chunked_) {  // HTTP/1.0: the close ends the body
      header_sent_ = false;
      return close();
    }
    // All sent: the last chunk, then the connection's next request.
    writing_ = true;
    stream_.expires_after(shared_.options.write_timeout);
    ++shared_.writes;
    net::async_write(stream_, http::make_chunk_last(), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      --self->shared_.writes;
      self->writing_ = false;
      self->stream_.expires_never();
      self->header_sent_ = false;
      self->self_.reset();
      if (ec) return self->close();
      self->after_write(self->keep_alive_);
    });
    return;
  }
  wbuf_ = std::move(out_);
  out_.clear();
  writing_ = true;
  stream_.expires_after(shared_.options.write_timeout);
  ++shared_.writes;
  auto written = [self = shared_from_this()](beast::error_code ec, std::size_t) {
    --self->shared_.writes;
    self->writing_ = false;
    self->stream_.expires_never();
    if (ec) return self->close();  // the client went away: its sequences are cancelled
    self->flush();
  };
  if (chunked_)
    net::async_write(stream_, http::make_chunk(net::buffer(wbuf_)), std::move(written));
  else
    net::async_write(stream_, net::buffer(wbuf_), std::move(written));
}

// ---- the listener ------------------------------------------------------------------------

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(Shared& shared, tcp::acceptor& acceptor) : shared_(shared), acceptor_(acceptor), pause_(shared.io) {}
  void accept() {
    acceptor_.async_accept(net::make_strand(shared_.io), [self = shared_from_this()](beast::error_code ec, tcp::socket s) {
      if (ec == net::error::operation_aborted || !self->acceptor_.is_open()) return;
      if (ec) return self->retry();
      self->admit(std::move(s));
      self->accept();
    });
  }

 private:
  // The accept failed, most often for want of a file descriptor (EMFILE): the connection is
  // still pending, so accepting again at once would fail again, a loop that spins a core.
  void retry() {
    pause_.expires_after(std::chrono::milliseconds(100));
    pause_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec && self->acceptor_.is_open()) self->accept();
    });
  }
  void admit(tcp::socket socket) {
    if (shared_.connections >= shared_.options.max_connections) {
      // Over the bound: a short answer written without waiting, then closed.
      const std::string body = error_body(ApiError(503, "too many connections", {}, "server_error"));
      const std::string reply = fmt::format(
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
          "Connection: close\r\nContent-Length: {}\r\n\r\n{}", body.size(), body);
      beast::error_code ignored;
      socket.non_blocking(true, ignored);
      socket.write_some(net::buffer(reply), ignored);
      socket.shutdown(tcp::socket::shutdown_both, ignored);
      socket.close(ignored);
      shared_.metrics.request("other", 503);
      return;
    }
    std::make_shared<Session>(std::move(socket), shared_)->start();
  }
  Shared& shared_;
  tcp::acceptor& acceptor_;
  net::steady_timer pause_;
};

// Listens and runs the I/O context until a signal's drain ends.
void run(Shared& shared, const std::function<void(const std::string& host, int port)>& on_listening) {
  net::io_context& io = shared.io;
  const ServerOptions& options = shared.options;
  Engine& engine = shared.engine;

  beast::error_code ec;
  const auto address = net::ip::make_address(options.host, ec);
  if (ec) throw std::runtime_error(fmt::format("--host {}: not an IP address ({})", printable(options.host), ec.message()));
  tcp::acceptor acceptor(io);
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    throw std::runtime_error(fmt::format("cannot listen on {}:{}: {}", printable(options.host), options.port, ec.message()));
  on_listening(acceptor.local_endpoint().address().to_string(), acceptor.local_endpoint().port());
  std::make_shared<Listener>(shared, acceptor)->accept();

  // SIGINT / SIGTERM: stop accepting, let in-flight requests finish within shutdown_timeout,
  // cancel what is left, then stop.
  net::signal_set signals(io, SIGINT, SIGTERM);
  net::steady_timer timer(io);
  Clock::time_point deadline;
  bool cancelled = false;
  std::function<void()> poll = [&] {
    const bool idle = engine.active() == 0 && shared.generating == 0 && shared.writes == 0;
    if (idle || Clock::now() > deadline + std::chrono::seconds(2)) return io.stop();
    if (!cancelled && Clock::now() > deadline) {
      engine.cancel_all();
      cancelled = true;
    }
    timer.expires_after(std::chrono::milliseconds(50));
    timer.async_wait([&](beast::error_code) { poll(); });
  };
  signals.async_wait([&](beast::error_code e, int signal) {
    if (e) return;
    shared.log(fmt::format("signal {}: draining (at most {} s)", signal, options.shutdown_timeout.count()));
    shared.draining = true;
    beast::error_code ignored;
    acceptor.close(ignored);
    engine.drain();
    deadline = Clock::now() + options.shutdown_timeout;
    poll();
  });
  io.run();
}

}  // namespace

void serve(LanguageModel& model, const Tokenizer* tokenizer, const ServerOptions& options,
           const std::function<void(const std::string& host, int port)>& on_listening) {
  // Lifetimes: the sessions live in the I/O context's handlers and use the engine and Shared;
  // the engine's sinks post into the I/O context. So the engine's thread stops first (no sink
  // runs after it), then the I/O context is destroyed with its sessions, then the rest.
  auto io = std::make_unique<net::io_context>(1);
  Metrics metrics;
  Engine engine(model, tokenizer, options.engine, metrics);
  Shared shared{*io, model, tokenizer, options, metrics, engine};
  run(shared, on_listening);
  engine.stop();
  io.reset();
}

}  // namespace mxmoe::serve
