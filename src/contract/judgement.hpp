// What the oracle decided for one operation of a kind without a Request (src/oracle/
// judge_each.hpp makes one): the operation as judged, every candidate's Verdict in the
// candidates' order, and the chosen one. (A MoE layer's is the richer Selection,
// mxmoe/selection.hpp: preferences, suggestions and a JSON form.) In the contract so that
// what is judged (a dense::Linear) can be handed it and keep it.
#pragma once

#include <string>
#include <vector>

#include "mxmoe/verdict.hpp"

namespace mxmoe {

template <class Op>
struct Judgement {
  Op op;                            // as judged
  std::vector<Verdict> candidates;  // every candidate, in the order it was handed
  std::string chosen;               // "" when none fits
  std::string why;                  // "lowest estimated cost: ...", "" when none fits
};

}  // namespace mxmoe
