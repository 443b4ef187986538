// The server's request parser (src/serve/api.hpp) on hostile bodies: every refusal is a 400
// naming the field; values are taken exactly or refused, never wrapped or rounded. The
// server itself, over HTTP with the OpenAI client, is python/tests/test_serve.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "serve/api.hpp"

namespace mxmoe::serve {
namespace {

using ::testing::HasSubstr;

GenerationRequest completions(const std::string& body) {
  return parse_request(Endpoint::completions, body, {});
}

// The ApiError of BODY: its status and the field it names.
std::pair<int, std::string> refusal(const std::string& body, Endpoint e = Endpoint::completions) {
  try {
    parse_request(e, body, {});
  } catch (const ApiError& err) {
    return {err.status(), err.param()};
  }
  return {0, "accepted"};
}

TEST(Api, ReadsEveryFieldOfACompletionRequest) {
  const auto r = completions(
      R"({"model": "m", "prompt": ["a", [1, 2]], "max_tokens": 7, "temperature": 0.5,
          "top_p": 0.25, "top_k": -1, "min_p": 0.5, "seed": 18446744073709551615,
          "stop": "\n\n", "stream": true, "stream_options": {"include_usage": true},
          "logprobs": 3, "ignore_eos": true, "n": 1, "echo": false, "user": "x",
          "an_unknown_field": [1, {"deep": null}]})");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(*r.prompts[0].text, "a");
  EXPECT_EQ(r.prompts[1].ids, (std::vector<std::int32_t>{1, 2}));
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_EQ(r.temperature, 0.5f);
  EXPECT_EQ(r.top_p, 0.25f);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_EQ(r.min_p, 0.5f);
  EXPECT_EQ(*r.seed, 18446744073709551615ull);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n\n"});
  EXPECT_TRUE(r.stream && r.include_usage && r.ignore_eos);
  EXPECT_EQ(r.logprobs, 3);
  // Defaults: OpenAI's temperature 1, no max_tokens (the server's default applies).
  const auto d = completions(R"({"prompt": "x", "max_tokens": null})");
  EXPECT_EQ(d.temperature, 1.0f);
  EXPECT_FALSE(d.max_tokens);
  EXPECT_EQ(d.logprobs, -1);
}

TEST(Api, ReadsChatMessagesAndTheirLogprobs) {
  const auto r = parse_request(Endpoint::chat,
                               R"({"messages": [{"role": "system", "content": "s"},
                                   {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                {"type": "text", "text": "b"}]}],
                                   "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 2})",
                               {});
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(*r.max_tokens, 5);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_EQ(parse_request(Endpoint::chat, R"({"messages": [{"role": "user", "content": "x"}]})", {}).logprobs, -1);
}

TEST(Api, WrongTypesAndRangesAreRefusedNamingTheField) {
  EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": "8"})"), std::make_pair(400, std::string("max_tokens")));
  EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": 0})").second, "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": 8.5})").second, "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": 1e300})").second, "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": 18446744073709551615})").second, "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": true})").second, "max_tokens");
  EXPECT_EQ(*completions(R"({"prompt": "x", "max_tokens": 8.0})").max_tokens, 8);
  EXPECT_EQ(refusal(R"({"prompt": "x", "temperature": -0.1})").second, "temperature");
  EXPECT_EQ(refusal(R"({"prompt": "x", "temperature": "hot"})").second, "temperature");
  EXPECT_EQ(refusal(R"({"prompt": "x", "top_p": 0})").second, "top_p");
  EXPECT_EQ(refusal(R"({"prompt": "x", "seed": 1.5})").second, "seed");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stop": ""})").second, "stop");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stop": [1]})").second, "stop");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stream": "yes"})").second, "stream");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stream_options": {"include_usage": true}})").second, "stream_options");
  EXPECT_EQ(refusal(R"({"prompt": "x", "logprobs": 6})").second, "logprobs");
  EXPECT_EQ(refusal(R"({"prompt": "x", "n": 2})").second, "n");
  EXPECT_EQ(refusal(R"({"prompt": "x", "echo": true})").second, "echo");
  EXPECT_EQ(refusal(R"({"prompt": "x", "presence_penalty": 0.5})").second, "presence_penalty");
  EXPECT_EQ(refusal(R"({"prompt": "x", "logit_bias": {"5": 1}})").second, "logit_bias");
  EXPECT_EQ(refusal(R"({"prompt": [1, -2]})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": [1, 2147483648]})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": [[]]})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": []})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": {"a": 1}})").second, "prompt");
  EXPECT_EQ(refusal(R"({"max_tokens": 5})").second, "prompt");
  EXPECT_EQ(refusal(R"({"messages": "hi"})", Endpoint::chat).second, "messages");
  EXPECT_EQ(refusal(R"({"messages": [{"content": "x"}]})", Endpoint::chat).second, "messages");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", Endpoint::chat).second,
            "messages.content");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", Endpoint::chat).second,
            "top_logprobs");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 21, "logprobs": true})",
                    Endpoint::chat).second, "top_logprobs");
}

TEST(Api, BodiesThatAreNotJsonObjectsAreRefused) {
  for (const std::string& body : {std::string("{\"prompt\": "), std::string("[1]"), std::string("\"x\""),
                                 std::string(2000, '[') + std::string(2000, ']'),
                                 std::string("{\"prompt\": \"\xc3\x28\"}"),
                                 std::string("{\"prompt\": \"a\", \"prompt\": \"b\"}"), std::string()}) {
    EXPECT_EQ(refusal(body).first, 400) << body.substr(0, 40);
  }
  try {
    completions("{\"prompt\": ");
  } catch (const ApiError& e) {
    EXPECT_THAT(e.what(), HasSubstr("JSON"));
  }
}

TEST(Api, LimitsBoundPromptsStopsAndMessages) {
  ApiLimits small;
  small.max_prompts = 2;
  small.max_stop = 1;
  small.max_prompt_tokens = 3;
  EXPECT_THROW(parse_request(Endpoint::completions, R"({"prompt": ["a", "b", "c"]})", small), ApiError);
  EXPECT_THROW(parse_request(Endpoint::completions, R"({"prompt": "a", "stop": ["x", "y"]})", small), ApiError);
  EXPECT_THROW(parse_request(Endpoint::completions, R"({"prompt": [1, 2, 3, 4]})", small), ApiError);
  EXPECT_NO_THROW(parse_request(Endpoint::completions, R"({"prompt": [1, 2, 3]})", small));
}

TEST(Api, TheErrorBodyIsOpenAIsErrorObject) {
  const std::string body = error_body(ApiError(400, "'n' is wrong \x1b[31m", "n"));
  EXPECT_THAT(body, HasSubstr(R"("type":"invalid_request_error")"));
  EXPECT_THAT(body, HasSubstr(R"("param":"n")"));
  EXPECT_THAT(body, HasSubstr(R"("code":null)"));
  EXPECT_THAT(body, HasSubstr(R"(\u001b)"));  // control characters escaped by JSON
  EXPECT_THAT(error_body(ApiError(503, "busy", "", "server_error")), HasSubstr(R"("param":null)"));
}

}  // namespace
}  // namespace mxmoe::serve
