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
//   MXMOE_ALLOW_REFERENCE=1|0       let the oracle choose the reference backend unforced
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

// A host's explicit choices, each unset one leaving the environment's value: the command line's
// flags, the C API's mxmoe_request_params fields, the Python keyword arguments. All three edges
// apply them through apply_request_overrides(), so they accept the same values and refuse the
// others in the same words.
struct MXMOE_API RequestOverrides {
  std::optional<std::string> forced_backend;                  // a registered name ("": none forced)
  std::optional<std::vector<std::string>> excluded_backends;  // registered names
  std::optional<std::string> activation;                      // parse_activation_format's keys
  std::optional<bool> batch_invariant;
  std::optional<bool> allow_reference;
  std::optional<int> threads;      // 0 (all logical CPUs) .. kMaxThreads
  std::optional<int> tokens_hint;  // 1 .. kMaxTokensPerCall
  std::optional<int> ep_size;      // 1 .. kMaxExperts
  std::optional<int> ep_rank;      // 0 .. ep_size - 1 (of the result)
};

// What an edge calls a field of Request in its messages: given "threads", the command line says
// "--threads", the C API "params.threads", Python "threads". The fields are Request's names:
// forced_backend, excluded_backends, activation, batch_invariant, allow_reference, threads,
// tokens_hint, ep_size, ep_rank.
using RequestFieldName = std::function<std::string(std::string_view field)>;

// BASE (the environment's Request, config_from_environment().request) with OVERRIDES applied.
// Throws ConfigError "NAME: problem" (NAME from name()) for a number out of its range, an unknown
// backend or activation name, or an ep_rank outside [0, ep_size) once both are applied.
MXMOE_API Request apply_request_overrides(Request base, const RequestOverrides& overrides,
                                          const RequestFieldName& name);

}  // namespace mxmoe
