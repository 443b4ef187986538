// JSON parsing with the checks nlohmann::json leaves out: it silently keeps the last of two
// equal keys (two readers of one file could then see different tensors), and it accepts any
// nesting depth. Invalid UTF-8 inside strings is already a parse error in nlohmann.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace mxmoe::io {

// Parses TEXT; throws LoadError "LABEL: ..." on invalid JSON or UTF-8, a duplicate key
// (naming it), or objects/arrays nested deeper than max_depth.
nlohmann::json parse_strict_json(std::string_view text, const std::string& label, int max_depth);

}  // namespace mxmoe::io
