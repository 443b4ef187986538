// What the oracle says of one candidate, whatever kind it is (a MoE expert backend judged on
// a Deployment, a dense kernel judged on a DenseOp): its name, its numerics class, whether it
// runs and every reason it does not, and the estimate that ranks it. Part of the contract
// (the library's Candidate<Op> interface is judged into one), so that what is judged can keep
// the verdicts it was handed.
#pragma once

#include <string>
#include <vector>

#include "mxmoe/export.h"
#include "mxmoe/reason_codes.hpp"

namespace mxmoe {

struct MXMOE_API Verdict {
  std::string name;
  std::string numerics_class;  // Candidate<Op>::numerics_class()
  bool supported = false;
  std::vector<Rejection> reasons;  // all of them; empty when supported
  // When supported: the estimate that ranks it (Candidate<Op>::estimate_us). A MoE backend:
  // microseconds per call of the whole layer (ep_size=1) at tokens_hint; for a
  // batch-invariant request, summed over 1, 8, 64 and 512 tokens (docs/ORACLE.md). A dense
  // kernel: microseconds per call of one row (a decode step).
  double estimated_us = 0;
  friend bool operator==(const Verdict&, const Verdict&) = default;
};

}  // namespace mxmoe
