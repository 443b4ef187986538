// The MXMOE_* variables through the library's one parser (include/mxmoe/environment.hpp), with an
// environment supplied by the test: every variable lands in its field, every bad value is a
// ConfigError naming the variable and what is accepted, and unset variables leave defaults.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "mxmoe/environment.hpp"
#include "mxmoe/runtime.hpp"
#include "runtime/setting_parsers.hpp"

namespace mxmoe {
namespace {

using ::testing::HasSubstr;

EnvironmentConfig parse(const std::map<std::string, std::string>& vars) {
  return config_from_environment([&](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    (void)parse(vars);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Environment, UnsetVariablesGiveTheDefaults) {
  const EnvironmentConfig c = parse({});
  EXPECT_EQ(c.request, Request{});
  EXPECT_EQ(c.max_isa, "");
  EXPECT_EQ(c.ep_deadline_s, 30.0);
  EXPECT_EQ(c.log_categories, static_cast<unsigned>(LogCategory::warning));
  EXPECT_TRUE(c.variables_set.empty());
}

TEST(Environment, EveryVariableLandsInItsField) {
  const EnvironmentConfig c = parse({{"MXMOE_BACKEND", "avx2"},
                                     {"MXMOE_EXCLUDE_BACKENDS", "amx_int8,reference"},
                                     {"MXMOE_EXCLUDE", "avx512_vnni"},
                                     {"MXMOE_ACTIVATION", "int8"},
                                     {"MXMOE_BATCH_INVARIANT", "yes"},
                                     {"MXMOE_THREADS", "1024"},
                                     {"MXMOE_ALLOW_REFERENCE", "on"},
                                     {"MXMOE_MAX_ISA", "avx2"},
                                     {"MXMOE_VERBOSE", "dispatch"},
                                     {"MXMOE_EP_DEADLINE", "2.5"}});
  // avx2 and avx512_vnni are former names (Backend::former_names): read as the names now.
  EXPECT_EQ(c.request.forced_backend, "avx2_fp32");
  EXPECT_EQ(c.request.excluded_backends,
            (std::vector<std::string>{"amx_int8", "reference", "avx512_vnni_int8"}));
  EXPECT_EQ(c.request.activation, ActivationFormat::int8);
  EXPECT_TRUE(c.request.batch_invariant);
  EXPECT_EQ(c.request.threads, kMaxThreads);
  EXPECT_TRUE(c.request.allow_reference);
  EXPECT_EQ(c.max_isa, "avx2");
  EXPECT_TRUE(c.log_categories & static_cast<unsigned>(LogCategory::dispatch));
  EXPECT_EQ(c.ep_deadline_s, 2.5);
  EXPECT_EQ(c.variables_set.size(), 10u);
  EXPECT_EQ(environment_variable_names().size(), 10u);
}

TEST(Environment, BadValuesNameTheVariableAndTheAcceptedValues) {
  EXPECT_EQ(error_of({{"MXMOE_THREADS", "100000"}}),
            "MXMOE_THREADS=100000: expected an integer in [0, 1024] (0 = all logical CPUs)");
  for (const char* bad : {"abc", "-1", "1.5", "2x", " 2", "99999999999999999999"})
    EXPECT_THAT(error_of({{"MXMOE_THREADS", bad}}), HasSubstr("MXMOE_THREADS=")) << bad;
  EXPECT_THAT(error_of({{"MXMOE_BATCH_INVARIANT", "maybe"}}), HasSubstr("not a boolean"));
  EXPECT_THAT(error_of({{"MXMOE_ALLOW_REFERENCE", "2"}}), HasSubstr("MXMOE_ALLOW_REFERENCE=2"));
  EXPECT_THAT(error_of({{"MXMOE_ACTIVATION", "fp7"}}),
              HasSubstr("MXMOE_ACTIVATION=fp7: unknown activation format 'fp7'"));
  EXPECT_THAT(error_of({{"MXMOE_BACKEND", "cuda"}}),
              HasSubstr("MXMOE_BACKEND=cuda: unknown backend 'cuda'; valid backends: "));
  EXPECT_THAT(error_of({{"MXMOE_EXCLUDE", "avx2,nope"}}), HasSubstr("unknown backend 'nope'"));
  EXPECT_THAT(error_of({{"MXMOE_MAX_ISA", "avx9"}}), HasSubstr("MXMOE_MAX_ISA=avx9"));
  EXPECT_THAT(error_of({{"MXMOE_VERBOSE", "dispatch,all"}}),
              HasSubstr("unknown category 'all' (valid: dispatch)"));
  // A deadline of zero, below it, not a number or over a day is refused: a rank must give up
  // on a silent peer, and never at once.
  for (const char* bad : {"0", "-1", "1e-9", "0.0009", "abc", "1e9", "nan", "inf", "30s", " 5"})
    EXPECT_THAT(
        error_of({{"MXMOE_EP_DEADLINE", bad}}),
        HasSubstr(std::string("MXMOE_EP_DEADLINE=") + bad + ": expected seconds in [0.001, 86400]"))
        << bad;
  EXPECT_EQ(parse({{"MXMOE_EP_DEADLINE", "0.001"}}).ep_deadline_s, kMinEpDeadlineSeconds);
  EXPECT_EQ(parse({{"MXMOE_EP_DEADLINE", "0.25"}}).ep_deadline_s, 0.25);
  EXPECT_EQ(parse({{"MXMOE_EP_DEADLINE", "86400"}}).ep_deadline_s, kMaxEpDeadlineSeconds);
  // Empty values mean unset for the names and the activation.
  EXPECT_EQ(parse({{"MXMOE_BACKEND", ""}, {"MXMOE_ACTIVATION", ""}}).request, Request{});
}

TEST(Environment, LogSettingsKeepTheHostsCallback) {
  const auto mine = [](LogCategory, const char*, void*) {};
  const LogSink previous = set_log_sink({mine, nullptr, 0});
  apply_log_settings(parse({{"MXMOE_VERBOSE", "dispatch"}}));
  EXPECT_EQ(log_sink().callback, +mine);
  EXPECT_TRUE(log_enabled(LogCategory::dispatch));
  set_log_sink(previous);
}

// A variable's value is shown escaped: control characters (escape sequences) never reach the
// terminal raw, a NUL never cuts the message.
TEST(Environment, ControlCharactersInValuesAreEscaped) {
  for (const char* name : {"MXMOE_THREADS", "MXMOE_BACKEND", "MXMOE_ACTIVATION", "MXMOE_VERBOSE",
                           "MXMOE_BATCH_INVARIANT", "MXMOE_EP_DEADLINE", "MXMOE_MAX_ISA"}) {
    const std::string e = error_of({{name, "x\x1b]0;t\x07\x1b[2J"}});
    EXPECT_THAT(e, HasSubstr(std::string(name) + "=x\\x1b]0;t\\x07\\x1b[2J")) << name;
    EXPECT_EQ(e.find('\x1b'), std::string::npos) << e;
  }
}

// The edges' one override function (apply_request_overrides): each override set replaces the
// environment's value, each unset one leaves it, and every refusal names the field in the
// edge's own words.
std::string edge_name(std::string_view field) {
  return "<" + std::string(field) + ">";
}

Request overridden(const Request& base, const RequestOverrides& o) {
  return apply_request_overrides(base, o, edge_name);
}

std::string override_error(const RequestOverrides& o) {
  try {
    (void)overridden(Request{}, o);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(RequestOverrides, UnsetOverridesLeaveTheEnvironmentsValues) {
  const Request env = parse({{"MXMOE_BACKEND", "avx2"},
                             {"MXMOE_EXCLUDE", "reference"},
                             {"MXMOE_ACTIVATION", "bf16"},
                             {"MXMOE_BATCH_INVARIANT", "1"},
                             {"MXMOE_THREADS", "3"},
                             {"MXMOE_ALLOW_REFERENCE", "1"}})
                          .request;
  EXPECT_EQ(overridden(env, RequestOverrides{}), env);
}

TEST(RequestOverrides, EachOverrideReplacesItsField) {
  const Request env = parse({{"MXMOE_BACKEND", "avx2"},
                             {"MXMOE_EXCLUDE", "reference"},
                             {"MXMOE_ACTIVATION", "bf16"},
                             {"MXMOE_BATCH_INVARIANT", "1"},
                             {"MXMOE_THREADS", "3"}})
                          .request;
  RequestOverrides o;
  o.forced_backend = "";  // a forced backend cleared
  o.excluded_backends = std::vector<std::string>{"avx2", "avx512_vnni"};
  o.activation = "int8";
  o.batch_invariant = false;
  o.allow_reference = true;
  o.threads = 7;
  o.tokens_hint = 64;
  o.ep_size = 4;
  o.ep_rank = 3;
  const Request r = overridden(env, o);
  EXPECT_EQ(r.forced_backend, "");
  // Former names (Backend::former_names) come back as the names now.
  EXPECT_EQ(r.excluded_backends, (std::vector<std::string>{"avx2_fp32", "avx512_vnni_int8"}));
  EXPECT_EQ(r.activation, ActivationFormat::int8);
  EXPECT_FALSE(r.batch_invariant);
  EXPECT_TRUE(r.allow_reference);
  EXPECT_EQ(r.threads, 7);
  EXPECT_EQ(r.tokens_hint, 64);
  EXPECT_EQ(r.ep_size, 4);
  EXPECT_EQ(r.ep_rank, 3);
}

TEST(RequestOverrides, RefusalsNameTheFieldInTheEdgesWords) {
  RequestOverrides o;
  o.threads = kMaxThreads + 1;
  EXPECT_EQ(override_error(o), "<threads>: expected 0 (every logical CPU) or 1..1024, got 1025");
  o = {};
  o.threads = -1;
  EXPECT_THAT(override_error(o), HasSubstr("<threads>: expected 0"));
  o = {};
  o.tokens_hint = 0;
  EXPECT_EQ(override_error(o), "<tokens_hint>: expected 1..1048576, got 0");
  o.tokens_hint = kMaxTokensPerCall + 1;
  EXPECT_THAT(override_error(o), HasSubstr("<tokens_hint>: expected 1..1048576, got 1048577"));
  o = {};
  o.forced_backend = "cuda_marlin";
  EXPECT_THAT(override_error(o),
              HasSubstr("<forced_backend>: unknown backend 'cuda_marlin'; valid backends: "));
  EXPECT_THAT(override_error(o), HasSubstr("reference"));
  o = {};
  o.excluded_backends = std::vector<std::string>{"avx2", "nope\x1b"};
  EXPECT_THAT(override_error(o), HasSubstr("<excluded_backends>: unknown backend 'nope\\x1b'"));
  o = {};
  o.activation = "fp7";
  EXPECT_THAT(override_error(o), HasSubstr("<activation>: "));
  EXPECT_THAT(override_error(o), HasSubstr("bf16"));
  o = {};
  o.ep_size = 0;
  EXPECT_EQ(override_error(o), "<ep_size>: expected 1..65536, got 0");
  o = {};
  o.ep_size = 2;
  o.ep_rank = 2;
  EXPECT_EQ(override_error(o), "<ep_rank> 2 is outside [0, <ep_size> 2)");
  o = {};
  o.ep_rank = 1;  // against the environment's ep_size of 1
  EXPECT_EQ(override_error(o), "<ep_rank> 1 is outside [0, <ep_size> 1)");
}

TEST(RequestOverrides, CommaListsSkipEmptyItems) {
  EXPECT_EQ(split_comma_list("a,,b,"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(split_comma_list(""), std::vector<std::string>{});
  EXPECT_EQ(split_comma_list(",,"), std::vector<std::string>{});
}

}  // namespace
}  // namespace mxmoe
