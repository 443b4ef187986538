// Library-side configuration: the MXMOE_* environment variables, parsed by one function for
// the CLI, the C API and the bindings alike (the environment is read at the edge only, never
// in the middle of the flow). A host starts from this and overrides what its user set
// explicitly: command-line flags win over variables.
//
//   MXMOE_BACKEND=NAME              force a backend (Request::forced_backend)
//   MXMOE_EXCLUDE_BACKENDS=A,B      exclude backends (MXMOE_EXCLUDE is read too; joined)
//   MXMOE_ACTIVATION=f32|bf16|int8|mxfp8
//   MXMOE_BATCH_INVARIANT=1|0       (also true/false, yes/no, on/off)
//   MXMOE_THREADS=N                 0 (all logical CPUs) .. kMaxThreads
//   MXMOE_ALLOW_REFERENCE=1|0       let the oracle choose judge-only backends (reference)
//   MXMOE_MAX_ISA=none|avx2|avx512|amx   cap the hardware probe
//   MXMOE_VERBOSE=dispatch          comma list of extra log categories (log.hpp)
//   MXMOE_EP_DEADLINE=SECONDS       how long an expert-parallel rank waits for the others
//                                   (CommOptions::deadline_s), in [kMinEpDeadlineSeconds,
//                                   kMaxEpDeadlineSeconds]
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/deployment.hpp"
#include "mxmoe/export.h"
#include "mxmoe/hardware.hpp"
#include "mxmoe/log.hpp"

namespace mxmoe {

// A variable holding a value mxmoe cannot use; the message names the variable, the value and
// what is accepted ("MXMOE_THREADS=abc: expected an integer in [0, 1024]").
class MXMOE_API ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The longest MXMOE_EP_DEADLINE (one day): a longer wait is a hang by another name; the
// shortest (1 ms) still lets a message cross a node.
inline constexpr double kMinEpDeadlineSeconds = 0.001;
inline constexpr double kMaxEpDeadlineSeconds = 86400;

struct MXMOE_API EnvironmentConfig {
  Request request;            // the Request fields above; defaults where unset
  std::string max_isa;        // "" when MXMOE_MAX_ISA is unset
  double ep_deadline_s = 30;  // MXMOE_EP_DEADLINE
  unsigned log_categories = static_cast<unsigned>(LogCategory::warning);  // + MXMOE_VERBOSE
  std::vector<std::string> variables_set;  // the MXMOE_* names that were set (for reports)
};

// The variables' names, in the order above.
MXMOE_API std::vector<std::string_view> environment_variable_names();

// Reads the variables through LOOKUP (std::nullopt: unset), so hosts and tests can supply
// their own environment. Throws ConfigError for a bad value, including an unknown backend name.
using EnvironmentLookup = std::function<std::optional<std::string>(std::string_view name)>;
MXMOE_API EnvironmentConfig config_from_environment(const EnvironmentLookup& lookup);
// The same on the process environment (std::getenv).
MXMOE_API EnvironmentConfig config_from_environment();

// config_from_environment().request.
MXMOE_API Request request_from_environment();
// probe_hardware() capped by MXMOE_MAX_ISA.
MXMOE_API Hardware probe_hardware_from_environment();
// Sets the log sink's categories to config.log_categories, keeping its callback.
MXMOE_API void apply_log_settings(const EnvironmentConfig& config);

// Strict parsers shared by the variables and the CLI's flags; the message names WHAT.
MXMOE_API bool parse_bool_setting(std::string_view what, std::string_view value);
MXMOE_API int parse_thread_count(std::string_view what, std::string_view value);  // 0..kMaxThreads
// A comma-separated list of registered backend names (empty items skipped); ConfigError
// naming WHAT and the valid names for an unknown one.
MXMOE_API std::vector<std::string> parse_backend_list(std::string_view what, std::string_view list);
// Seconds in [kMinEpDeadlineSeconds, kMaxEpDeadlineSeconds], decimal ("2.5").
MXMOE_API double parse_deadline_seconds(std::string_view what, std::string_view value);

}  // namespace mxmoe
