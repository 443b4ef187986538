// MXMOE_* environment variables -> EnvironmentConfig (include/mxmoe/environment.hpp).
#include <fmt/core.h>

#include <charconv>
#include <cstdlib>

#include "backends/registry.hpp"
#include "base/printable.hpp"
#include "mxmoe/environment.hpp"
#include "mxmoe/log.hpp"
#include "mxmoe/oracle.hpp"
#include "mxmoe/runtime.hpp"
#include "runtime/setting_parsers.hpp"

namespace mxmoe {

namespace {

// BACKEND as the registered backend that answers to it calls itself now (a former name
// resolved); WHAT: "unknown backend ..." when none does.
std::string registered_name(const std::string& what, const std::string& backend) {
  const Backend* b = find_backend(backend);
  if (b == nullptr)
    throw ConfigError(unknown_backend_message(what, backend));
  return std::string(b->name());
}

// WHAT: "expected LO..HI, got V" unless V is in [LO, HI] (LO_MEANING: what LO stands for).
void require_in(const std::string& what, int v, int lo, int hi, std::string_view lo_meaning = {}) {
  if (v < lo || v > hi)
    throw ConfigError(lo_meaning.empty()
                          ? fmt::format("{}: expected {}..{}, got {}", what, lo, hi, v)
                          : fmt::format("{}: expected {} ({}) or {}..{}, got {}", what, lo,
                                        lo_meaning, lo + 1, hi, v));
}

}  // namespace

std::vector<std::string> split_comma_list(std::string_view s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.emplace_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Request apply_request_overrides(Request r, const RequestOverrides& o,
                                const RequestFieldName& name) {
  if (o.forced_backend)
    r.forced_backend = o.forced_backend->empty()
                           ? std::string()
                           : registered_name(name("forced_backend"), *o.forced_backend);
  if (o.excluded_backends) {
    r.excluded_backends.clear();
    for (const std::string& b : *o.excluded_backends)
      r.excluded_backends.push_back(registered_name(name("excluded_backends"), b));
  }
  if (o.activation) {
    try {
      r.activation = parse_activation_format(*o.activation);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(fmt::format("{}: {}", name("activation"), printable(e.what())));
    }
  }
  if (o.batch_invariant) r.batch_invariant = *o.batch_invariant;
  if (o.allow_reference) r.allow_reference = *o.allow_reference;
  if (o.threads) {
    require_in(name("threads"), *o.threads, 0, kMaxThreads, "every logical CPU");
    r.threads = *o.threads;
  }
  if (o.tokens_hint) {
    require_in(name("tokens_hint"), *o.tokens_hint, 1, kMaxTokensPerCall);
    r.tokens_hint = *o.tokens_hint;
  }
  if (o.ep_size) {
    require_in(name("ep_size"), *o.ep_size, 1, kMaxExperts);
    r.ep_size = *o.ep_size;
  }
  if (o.ep_rank) {
    require_in(name("ep_rank"), *o.ep_rank, 0, kMaxExperts - 1);
    r.ep_rank = *o.ep_rank;
  }
  if (r.ep_rank >= r.ep_size)
    throw ConfigError(fmt::format("{} {} is outside [0, {} {})", name("ep_rank"), r.ep_rank,
                                  name("ep_size"), r.ep_size));
  return r;
}

std::vector<std::string_view> environment_variable_names() {
  return {"MXMOE_BACKEND",         "MXMOE_EXCLUDE_BACKENDS", "MXMOE_EXCLUDE",
          "MXMOE_ACTIVATION",      "MXMOE_BATCH_INVARIANT",  "MXMOE_THREADS",
          "MXMOE_ALLOW_REFERENCE", "MXMOE_MAX_ISA",          "MXMOE_VERBOSE",
          "MXMOE_EP_DEADLINE"};
}

std::vector<std::string> parse_backend_list(std::string_view what, std::string_view list) {
  std::vector<std::string> names = split_comma_list(list);
  for (std::string& name : names)
    name = registered_name(fmt::format("{}={}", what, printable(name)), name);
  return names;
}

bool parse_bool_setting(std::string_view what, std::string_view v) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) return false;
  throw ConfigError(fmt::format("{}={}: not a boolean (use 1/0, true/false, yes/no, on/off)", what,
                                printable(v)));
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
    r.forced_backend = registered_name(fmt::format("MXMOE_BACKEND={}", printable(*v)), *v);
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
    r.allow_reference = parse_bool_setting("MXMOE_ALLOW_REFERENCE", *v);
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
    for (const std::string& mode : split_comma_list(*v)) {
      if (mode == "dispatch")
        c.log_categories |= static_cast<unsigned>(LogCategory::dispatch);
      else
        throw ConfigError(fmt::format("MXMOE_VERBOSE={}: unknown category '{}' (valid: dispatch)",
                                      printable(*v), printable(mode)));
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
