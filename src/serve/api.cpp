// OpenAI request bodies (api.hpp).
#include "serve/api.hpp"

#include <fmt/core.h>

#include <cmath>
#include <limits>

#include "base/json.hpp"

namespace mxmoe::serve {

namespace {

using json::Json;

constexpr int kMaxDepth = 16;

const char* type_name(const Json& v) {
  return v.type_name();  // "null", "object", "array", "string", "boolean", "number"
}

[[noreturn]] void wrong_type(const char* field, const char* want, const Json& v) {
  throw ApiError(400, fmt::format("'{}' must be {}, got {}", field, want, type_name(v)), field);
}

// The field, or nullptr when absent or null (OpenAI treats null as "not given").
const Json* field(const Json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::int64_t integer(const Json& v, const char* name, std::int64_t lo, std::int64_t hi) {
  auto out_of_range = [&] {
    return ApiError(400, fmt::format("'{}' must be an integer in [{}, {}]", name, lo, hi), name);
  };
  if (v.is_number_unsigned()) {  // nlohmann stores every non-negative literal so
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(hi) || static_cast<std::int64_t>(u) < lo) throw out_of_range();
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) {
    const auto x = v.get<std::int64_t>();
    if (x < lo || x > hi) throw out_of_range();
    return x;
  }
  if (v.is_number_float()) {  // 5.0 is 5, as Python's json gives it; 5.5 and 1e300 are not
    const double d = v.get<double>();
    if (d != std::floor(d) || !(d >= static_cast<double>(lo) && d <= static_cast<double>(hi)))
      throw out_of_range();
    return static_cast<std::int64_t>(d);
  }
  wrong_type(name, "an integer", v);
}

float number(const Json& v, const char* name, double lo, double hi) {
  if (!v.is_number()) wrong_type(name, "a number", v);
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi))
    throw ApiError(400, fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, d), name);
  return static_cast<float>(d);
}

bool boolean(const Json& v, const char* name) {
  if (!v.is_boolean()) wrong_type(name, "a boolean", v);
  return v.get<bool>();
}

const std::string& string(const Json& v, const char* name) {
  if (!v.is_string()) wrong_type(name, "a string", v);
  return v.get_ref<const std::string&>();
}

std::vector<std::int32_t> token_ids(const Json& v, const char* name, const ApiLimits& limits) {
  if (v.size() > limits.max_prompt_tokens)
    throw ApiError(400, fmt::format("'{}': a prompt of {} token ids exceeds the limit of {}", name,
                                    v.size(), limits.max_prompt_tokens), name);
  std::vector<std::int32_t> ids;
  ids.reserve(v.size());
  for (const Json& t : v) {
    if (!t.is_number_integer()) wrong_type(name, "a string, a list of strings or a list of token ids", t);
    ids.push_back(static_cast<std::int32_t>(integer(t, name, 0, std::numeric_limits<std::int32_t>::max())));
  }
  return ids;
}

std::vector<Prompt> prompts(const Json& body, const ApiLimits& limits) {
  const Json* p = field(body, "prompt");
  if (!p) throw ApiError(400, "'prompt' is required", "prompt");
  std::vector<Prompt> out;
  if (p->is_string()) {
    out.push_back({p->get<std::string>(), {}});
  } else if (p->is_array()) {
    if (p->empty()) throw ApiError(400, "'prompt' must not be empty", "prompt");
    if ((*p)[0].is_number()) {
      out.push_back({std::nullopt, token_ids(*p, "prompt", limits)});
    } else {
      if (p->size() > limits.max_prompts)
        throw ApiError(400, fmt::format("'prompt': {} prompts exceed the limit of {}", p->size(),
                                        limits.max_prompts), "prompt");
      for (const Json& one : *p) {
        if (one.is_string())
          out.push_back({one.get<std::string>(), {}});
        else if (one.is_array() && !one.empty())
          out.push_back({std::nullopt, token_ids(one, "prompt", limits)});
        else
          wrong_type("prompt", "a string, a list of strings or a list of token ids", one);
      }
    }
  } else {
    wrong_type("prompt", "a string, a list of strings or a list of token ids", *p);
  }
  return out;
}

std::vector<ChatMessage> messages(const Json& body, const ApiLimits& limits) {
  const Json* m = field(body, "messages");
  if (!m) throw ApiError(400, "'messages' is required", "messages");
  if (!m->is_array()) wrong_type("messages", "a list of messages", *m);
  if (m->empty()) throw ApiError(400, "'messages' must not be empty", "messages");
  if (m->size() > limits.max_messages)
    throw ApiError(400, fmt::format("'messages': {} messages exceed the limit of {}", m->size(),
                                    limits.max_messages), "messages");
  std::vector<ChatMessage> out;
  for (const Json& one : *m) {
    if (!one.is_object()) wrong_type("messages", "a list of objects", one);
    const Json* role = field(one, "role");
    if (!role) throw ApiError(400, "a message has no 'role'", "messages");
    ChatMessage msg{string(*role, "messages.role"), {}};
    const Json* content = field(one, "content");
    if (!content) {
      // An assistant turn may have no content (tool calls); mxmoe has no tools.
    } else if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      // Content parts: only text parts are understood.
      for (const Json& part : *content) {
        if (!part.is_object()) wrong_type("messages.content", "a string or a list of parts", part);
        const Json* type = field(part, "type");
        if (!type || string(*type, "messages.content.type") != "text")
          throw ApiError(400, "only text content parts are supported", "messages.content");
        const Json* text = field(part, "text");
        if (!text) throw ApiError(400, "a text part has no 'text'", "messages.content");
        msg.content += string(*text, "messages.content.text");
      }
    } else {
      wrong_type("messages.content", "a string or a list of parts", *content);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

std::string error_body(const ApiError& e) {
  Json j;
  j["error"] = {{"message", e.what()},
                {"type", e.type()},
                {"param", e.param().empty() ? Json(nullptr) : Json(e.param())},
                {"code", nullptr}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

GenerationRequest parse_request(Endpoint endpoint, std::string_view body, const ApiLimits& limits) {
  std::string error;
  const std::optional<Json> parsed = json::try_parse_strict(body, kMaxDepth, error);
  if (!parsed) throw ApiError(400, "the body is not a JSON request: " + error);
  const Json& j = *parsed;
  if (!j.is_object()) throw ApiError(400, fmt::format("the body must be a JSON object, got {}", type_name(j)));

  GenerationRequest r;
  r.endpoint = endpoint;
  if (const Json* v = field(j, "model")) string(*v, "model");  // any model name: there is one
  if (endpoint == Endpoint::completions)
    r.prompts = prompts(j, limits);
  else
    r.messages = messages(j, limits);

  const char* max_name = "max_tokens";
  const Json* max = field(j, "max_tokens");
  if (endpoint == Endpoint::chat)
    if (const Json* v = field(j, "max_completion_tokens")) max = v, max_name = "max_completion_tokens";
  if (max) r.max_tokens = static_cast<int>(integer(*max, max_name, 1, 1 << 24));
  if (const Json* v = field(j, "temperature")) r.temperature = number(*v, "temperature", 0.0, 2.0);
  if (const Json* v = field(j, "top_p")) {
    r.top_p = number(*v, "top_p", 0.0, 1.0);
    if (!(r.top_p > 0.0f)) throw ApiError(400, "'top_p' must be in (0, 1]", "top_p");
  }
  if (const Json* v = field(j, "top_k")) r.top_k = static_cast<int>(std::max<std::int64_t>(0, integer(*v, "top_k", -1, 1 << 24)));
  if (const Json* v = field(j, "min_p")) r.min_p = number(*v, "min_p", 0.0, 1.0);
  if (const Json* v = field(j, "seed")) {
    if (!v->is_number_integer()) wrong_type("seed", "an integer", *v);
    r.seed = v->is_number_unsigned() ? v->get<std::uint64_t>()
                                     : static_cast<std::uint64_t>(v->get<std::int64_t>());
  }
  if (const Json* v = field(j, "stop")) {
    auto add = [&](const Json& s) {
      const std::string& text = string(s, "stop");
      if (text.empty()) throw ApiError(400, "'stop' strings must not be empty", "stop");
      if (text.size() > limits.max_stop_bytes)
        throw ApiError(400, fmt::format("'stop' strings are limited to {} bytes", limits.max_stop_bytes), "stop");
      r.stop.push_back(text);
    };
    if (v->is_array()) {
      if (v->size() > limits.max_stop)
        throw ApiError(400, fmt::format("'stop': at most {} strings", limits.max_stop), "stop");
      for (const Json& s : *v) add(s);
    } else {
      add(*v);
    }
  }
  if (const Json* v = field(j, "stream")) r.stream = boolean(*v, "stream");
  if (const Json* v = field(j, "stream_options")) {
    if (!v->is_object()) wrong_type("stream_options", "an object", *v);
    if (!r.stream) throw ApiError(400, "'stream_options' is only allowed with 'stream': true", "stream_options");
    if (const Json* u = field(*v, "include_usage")) r.include_usage = boolean(*u, "stream_options.include_usage");
  }
  if (endpoint == Endpoint::completions) {
    if (const Json* v = field(j, "logprobs")) r.logprobs = static_cast<int>(integer(*v, "logprobs", 0, 5));
  } else {
    const Json* lp = field(j, "logprobs");
    const bool want = lp && boolean(*lp, "logprobs");
    if (const Json* v = field(j, "top_logprobs")) {
      const auto n = static_cast<int>(integer(*v, "top_logprobs", 0, 20));
      if (!want) throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
      r.logprobs = n;
    } else if (want) {
      r.logprobs = 0;
    }
  }
  if (const Json* v = field(j, "ignore_eos")) r.ignore_eos = boolean(*v, "ignore_eos");
  if (const Json* v = field(j, "n"); v && integer(*v, "n", 1, 128) != 1)
    throw ApiError(400, "'n': only 1 choice per prompt is supported", "n");
  if (const Json* v = field(j, "echo"); v && boolean(*v, "echo"))
    throw ApiError(400, "'echo' is not supported", "echo");
  for (const char* name : {"presence_penalty", "frequency_penalty"})
    if (const Json* v = field(j, name); v && number(*v, name, -2.0, 2.0) != 0.0f)
      throw ApiError(400, fmt::format("'{}' is not supported (only 0)", name), name);
  if (const Json* v = field(j, "logit_bias")) {
    if (!v->is_object()) wrong_type("logit_bias", "an object", *v);
    if (!v->empty()) throw ApiError(400, "'logit_bias' is not supported", "logit_bias");
  }
  return r;
}

}  // namespace mxmoe::serve
