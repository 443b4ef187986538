// The oracle's machinery over any kind of candidate (Candidate<Op>, contract/backend.hpp): the
// verdict on one candidate, the ranking of the supported ones and the sentence that says why
// the first won. judge() (mxmoe/judge.hpp) judges the MoE backends with it and adds what is
// theirs alone (a Request's filters, a family's preferences, suggestions); judge_each() judges
// a kind with no request of its own (the dense kernels of a whole model, whose asker, src/llm,
// hands the result to dense::Linear). Handed its candidates, as judge() is.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "contract/backend.hpp"
#include "contract/judgement.hpp"
#include "mxmoe/verdict.hpp"

namespace mxmoe {

// The indices of the supported verdicts, lowest estimate first; equal estimates by TIE_RANK
// of their names (a family's order; none: equal), then in the verdicts' order.
std::vector<std::size_t> rank_supported(
    std::span<const Verdict> verdicts,
    const std::function<std::size_t(std::string_view)>& tie_rank = {});

// Why verdicts[ranked[0]] won, its estimate said as BEST_COST: "lowest estimated cost: COST
// (the only supported candidate)", "(tied with NEXT; first in the ORDER order)" or "(next:
// NEXT X us)". RANKED is not empty.
std::string lowest_cost_why(std::span<const Verdict> verdicts, std::span<const std::size_t> ranked,
                            std::string_view best_cost, std::string_view order);

// The verdict on C for OP: every reason of its own check(), then FILTERS (the reasons the
// asker adds: a request's exclusions, say); when nothing stands in the way, ESTIMATE() ranks it.
template <class Op, class Estimate>
Verdict verdict_of(const Candidate<Op>& c, const Op& op, std::vector<Rejection> filters,
                   Estimate&& estimate) {
  Verdict v;
  v.name = std::string(c.name());
  v.numerics_class = std::string(c.numerics_class());
  v.reasons = c.check(op);
  for (Rejection& r : filters) v.reasons.push_back(std::move(r));
  v.supported = v.reasons.empty();
  if (v.supported) v.estimated_us = std::forward<Estimate>(estimate)();
  return v;
}

// "12.3 us per call": an estimate as judge_each() reports it.
std::string per_call_cost(const Verdict& v);

// Judges every candidate on OP (its check(), its estimate_us() when supported) and chooses the
// lowest estimate; equal ones in the candidates' order. Never throws for lack of a candidate:
// chosen == "" then, every reason kept.
template <class Op>
Judgement<Op> judge_each(const Op& op, std::span<const Candidate<Op>* const> candidates) {
  Judgement<Op> j;
  j.op = op;
  for (const Candidate<Op>* c : candidates)
    j.candidates.push_back(verdict_of(*c, j.op, {}, [&] { return c->estimate_us(j.op); }));
  const std::vector<std::size_t> ranked = rank_supported(j.candidates);
  if (ranked.empty()) return j;
  const Verdict& best = j.candidates[ranked.front()];
  j.chosen = best.name;
  j.why = lowest_cost_why(j.candidates, ranked, per_call_cost(best), "candidates'");
  return j;
}

}  // namespace mxmoe
