// The parsers behind the MXMOE_* variables (mxmoe/environment.hpp), which the C API and the
// command's flags share: the library's own, a host reads settings through environment.hpp.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/environment.hpp"

namespace mxmoe {

// The items of a comma-separated list, empty ones skipped ("a,,b," is {a, b}): the syntax of
// MXMOE_EXCLUDE_BACKENDS and of the C API's excluded_backends.
std::vector<std::string> split_comma_list(std::string_view list);

// Strict parsers shared by the variables and the CLI's flags; the message names WHAT.
bool parse_bool_setting(std::string_view what, std::string_view value);
int parse_thread_count(std::string_view what, std::string_view value);  // 0..kMaxThreads
// A comma-separated list of registered backend names (empty items skipped; a former name comes
// back as the current one, Backend::former_names); ConfigError naming WHAT and the valid names
// for an unknown one.
std::vector<std::string> parse_backend_list(std::string_view what, std::string_view list);
// Seconds in [kMinEpDeadlineSeconds, kMaxEpDeadlineSeconds], decimal ("2.5").
double parse_deadline_seconds(std::string_view what, std::string_view value);

}  // namespace mxmoe
