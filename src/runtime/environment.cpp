// MXMOE_* environment variables -> EnvironmentConfig (include/mxmoe/config.hpp).
#include <fmt/core.h>

#include <charconv>
#include <cstdlib>

#include "base/printable.hpp"
#include "mxmoe/config.hpp"
#include "mxmoe/log.hpp"
#include "mxmoe/oracle.hpp"
#include "mxmoe/runtime.hpp"

namespace mxmoe {

namespace {

std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.emplace_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::string checked_backend(std::string_view variable, const std::string& name) {
  if (find_backend(name) == nullptr)
    throw ConfigError(fmt::format("{}={}: unknown backend '{}' (valid: {})", variable, printable(name),
                                  printable(name),
                                  backend_names()));
  return name;
}

}  // namespace

std::vector<std::string_view> environment_variable_names() {
  return {"MXMOE_BACKEND",         "MXMOE_EXCLUDE_BACKENDS", "MXMOE_EXCLUDE",
          "MXMOE_ACTIVATION",      "MXMOE_BATCH_INVARIANT",  "MXMOE_THREADS",
          "MXMOE_ALLOW_REFERENCE", "MXMOE_MAX_ISA",          "MXMOE_VERBOSE",
          "MXMOE_EP_DEADLINE"};
}

std::vector<std::string> parse_backend_list(std::string_view what, std::string_view list) {
  std::vector<std::string> names = split_commas(list);
  for (const std::string& name : names) checked_backend(what, name);
  return names;
}

bool parse_bool_setting(std::string_view what, std::string_view v) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) return false;
  throw ConfigError(
      fmt::format("{}={}: not a boolean (use 1/0, true/false, yes/no, on/off)", what, printable(v)));
}

int parse_thread_count(std::string_view what, std::string_view v) {
  int n = -1;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < 0 || n > kMaxThreads)
    throw ConfigError(fmt::format("{}={}: expected an integer in [0, {}] (0 = all logical CPUs)",
                                  what, printable(v), kMaxThreads));
  return n;
}

double parse_deadline_seconds(std::string_view what, std::string_view v) {
  double d = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
  // (NaN fails every comparison: refused.)
  if (ec != std::errc() || end != v.data() + v.size() || !(d >= kMinEpDeadlineSeconds) ||
      !(d <= kMaxEpDeadlineSeconds))
    throw ConfigError(fmt::format("{}={}: expected seconds in [{}, {}]", what, printable(v),
                                  kMinEpDeadlineSeconds, kMaxEpDeadlineSeconds));
  return d;
}

EnvironmentConfig config_from_environment(const EnvironmentLookup& lookup) {
  EnvironmentConfig c;
  c.log_categories = static_cast<unsigned>(LogCategory::warning);
  const auto get = [&](std::string_view name) -> std::optional<std::string> {
    std::optional<std::string> v = lookup(name);
    if (v) c.variables_set.emplace_back(name);
    return v;
  };
  Request& r = c.request;
  if (const auto v = get("MXMOE_BACKEND"); v && !v->empty())
    r.forced_backend = checked_backend("MXMOE_BACKEND", *v);
  for (const char* name : {"MXMOE_EXCLUDE_BACKENDS", "MXMOE_EXCLUDE"})
    if (const auto v = get(name))
      for (std::string& b : parse_backend_list(name, *v)) r.excluded_backends.push_back(b);
  if (const auto v = get("MXMOE_ACTIVATION"); v && !v->empty()) {
    try {
      r.activation = parse_activation_format(*v);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(fmt::format("MXMOE_ACTIVATION={}: {}", printable(*v), printable(e.what())));
    }
  }
  if (const auto v = get("MXMOE_BATCH_INVARIANT"))
    r.batch_invariant = parse_bool_setting("MXMOE_BATCH_INVARIANT", *v);
  if (const auto v = get("MXMOE_THREADS"); v && !v->empty())
    r.threads = parse_thread_count("MXMOE_THREADS", *v);
  if (const auto v = get("MXMOE_ALLOW_REFERENCE"))
    r.allow_judge_only = parse_bool_setting("MXMOE_ALLOW_REFERENCE", *v);
  if (const auto v = get("MXMOE_MAX_ISA"); v && !v->empty()) {
    try {
      (void)cap_isa(IsaFeatures{}, *v);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(fmt::format("MXMOE_MAX_ISA={}: {}", printable(*v), printable(e.what())));
    }
    c.max_isa = *v;
  }
  if (const auto v = get("MXMOE_EP_DEADLINE"); v && !v->empty())
    c.ep_deadline_s = parse_deadline_seconds("MXMOE_EP_DEADLINE", *v);
  if (const auto v = get("MXMOE_VERBOSE")) {
    for (const std::string& mode : split_commas(*v)) {
      if (mode == "dispatch")
        c.log_categories |= static_cast<unsigned>(LogCategory::dispatch);
      else
        throw ConfigError(
            fmt::format("MXMOE_VERBOSE={}: unknown category '{}' (valid: dispatch)", printable(*v),
                        printable(mode)));
    }
  }
  return c;
}

EnvironmentConfig config_from_environment() {
  return config_from_environment([](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

Request request_from_environment() {
  return config_from_environment().request;
}

Hardware probe_hardware_from_environment() {
  return probe_hardware(config_from_environment().max_isa);
}

void apply_log_settings(const EnvironmentConfig& config) {
  LogSink sink = log_sink();
  sink.categories = config.log_categories;
  set_log_sink(sink);
}

}  // namespace mxmoe
