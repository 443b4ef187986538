// What the oracle decided for a MoE layer, as plain data with a JSON round trip: a Verdict
// per candidate (mxmoe/verdict.hpp, shared with every kind of candidate), the Suggestions
// when none fits, and the Selection that holds them with the deployment as judged. (judge() and select() that make one: mxmoe/judge.hpp.)
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/deployment.hpp"
#include "mxmoe/export.h"
#include "mxmoe/reason_codes.hpp"
#include "mxmoe/verdict.hpp"

namespace mxmoe {

// The single change of the Request that would let some candidate run.
struct MXMOE_API Suggestion {
  std::string change;   // "batch_invariant=false", "activation=bf16", ...
  std::string backend;  // the candidate it would allow
  std::string text;     // "batch_invariant=false would allow amx_int8"
  friend bool operator==(const Suggestion&, const Suggestion&) = default;
};

struct MXMOE_API Selection {
  Deployment deployment;  // as judged (activation resolved from preferences)
  std::string preferences_source;
  std::vector<Verdict> candidates;      // every registered backend, excluded ones included
  std::string chosen;                   // "" when none fits
  std::string why;                      // "forced", "lowest estimated cost (12.3 us)", ...
  std::vector<Suggestion> suggestions;  // filled when none fits
  friend bool operator==(const Selection&, const Selection&) = default;
};

MXMOE_API std::string to_json(const Selection&);
MXMOE_API Selection selection_from_json(std::string_view);
// The report of `mxmoe explain --json` (also the Python package's mxmoe.explain() and
// Layer.selection): {selected, why, preferences, deployment, candidates (name, supported,
// estimated_us or null, reasons), error (the NoBackendError message, or null), suggestions}.
// A report for people and tools; to_json above is the form that reads back.
MXMOE_API std::string explain_json(const Selection&);

}  // namespace mxmoe
