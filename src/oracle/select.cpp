// judge() and select(): the one selection path. Every candidate is judged with its own
// check(); the request's filters (exclusions, a forced backend) add their reasons on top of
// the candidate's own, so a report always shows everything that stands in the way.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "mxmoe/judge.hpp"
#include "mxmoe/log.hpp"
#include "mxmoe/no_backend_error.hpp"
#include "mxmoe/reports.hpp"
#include "oracle/candidates.hpp"
#include "oracle/judge_each.hpp"
#include "oracle/report.hpp"

namespace mxmoe {
namespace {

bool contains(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// NAME as the candidate that answers to it calls itself now (a former name resolved).
std::string current_name(const std::string& name, std::span<const Backend* const> candidates,
                         std::string_view role) {
  if (const Backend* b = find_backend(name, candidates)) return std::string(b->name());
  throw std::invalid_argument(unknown_backend_message(role, name, candidates));
}

std::size_t preference_rank(const Preferences& prefs, std::string_view name) {
  const auto it = std::find(prefs.order.begin(), prefs.order.end(), name);
  return static_cast<std::size_t>(it - prefs.order.begin());  // unlisted: after all listed
}

// A batch-invariant request must get the same numerics whatever the batch, also when the
// layer is built again for another batch size (a prefill and a decode deployment of one
// model): its ranking cannot depend on tokens_hint. It uses the summed estimate over this
// fixed mix of decode and prefill batch sizes instead.
constexpr int kInvariantMix[] = {1, 8, 64, 512};

// Candidates are ranked by the whole layer's estimate (ep_size=1), never by one rank's share:
// a rank's share changes with the EP size and the placement, and the choice must not, so that
// `mpirun -n N` picks what one process on the same hardware picks and the output bits do not
// depend on N (docs/DISTRIBUTED.md). Every rank of a group then ranks with the same figures.
Deployment whole_layer(Deployment d) {
  d.request.ep_size = 1;
  d.request.ep_rank = 0;
  d.request.placement.clear();
  return d;
}

double ranking_estimate(const Backend& b, const Deployment& deployment) {
  Deployment d = whole_layer(deployment);
  if (!d.request.batch_invariant) return b.estimate_us(d);
  double sum = 0;
  for (int tokens : kInvariantMix) {
    d.request.tokens_hint = tokens;
    sum += b.estimate_us(d);
  }
  return sum;
}

std::string cost_text(const Verdict& v, const Request& r) {
  if (r.batch_invariant)
    return fmt::format(
        "{:.1f} us summed over 1, 8, 64 and 512 tokens (batch invariant: one "
        "choice for every batch size)",
        v.estimated_us);
  const int tokens = r.tokens_hint;
  return fmt::format("{:.1f} us at {} token{}", v.estimated_us, tokens, tokens == 1 ? "" : "s");
}

// Picks the supported candidate with the lowest estimate (ties: the family's order, then the
// candidates' order) and says why.
void choose(Selection& s, const Preferences& prefs, std::string_view group = "") {
  const Request& req = s.deployment.request;
  const std::vector<std::size_t> ranked = rank_supported(
      s.candidates, [&](std::string_view name) { return preference_rank(prefs, name); });
  if (ranked.empty()) return;

  const Verdict& best = s.candidates[ranked.front()];
  s.chosen = best.name;
  if (!req.forced_backend.empty()) {
    s.why = fmt::format("forced by the request (--backend / MXMOE_BACKEND); estimated {}",
                        cost_text(best, req));
  } else {
    const bool listed = preference_rank(prefs, best.name) < prefs.order.size();
    s.why = lowest_cost_why(s.candidates, ranked, cost_text(best, req),
                            listed ? prefs.source : std::string("registered backends'"));
  }
  if (!group.empty()) s.why = fmt::format("{}; {}", group, s.why);
}

// Judges every candidate and chooses; no suggestions (those re-run this function).
Selection judge_candidates(const Deployment& d, const Preferences& prefs,
                           std::span<const Backend* const> candidates) {
  Selection s;
  s.deployment = d;
  // The request's names as the candidates call themselves (a former name resolved), so the
  // verdicts and the report speak of one name.
  Request& named = s.deployment.request;
  if (!named.forced_backend.empty())
    named.forced_backend =
        current_name(named.forced_backend, candidates, "forced by --backend / MXMOE_BACKEND");
  std::vector<std::string> excluded;  // each once (a former and a current name are one)
  for (const std::string& name : named.excluded_backends) {
    std::string now =
        current_name(name, candidates, "excluded by --exclude / MXMOE_EXCLUDE_BACKENDS");
    if (!contains(excluded, now)) excluded.push_back(std::move(now));
  }
  named.excluded_backends = std::move(excluded);
  const Request& req = s.deployment.request;
  if (!s.deployment.request.activation) s.deployment.request.activation = prefs.default_activation;
  s.preferences_source = prefs.source;

  for (const Backend* b : candidates) {
    const std::string name(b->name());
    // The request's filters, after the candidate's own reasons.
    std::vector<Rejection> filters;
    if (contains(req.excluded_backends, name))
      filters.push_back({ReasonCode::user_excluded, "the request excludes this backend",
                         "not excluded", "excluded",
                         "remove it from --exclude / MXMOE_EXCLUDE_BACKENDS"});
    if (b->is_reference() && req.forced_backend != name && !req.allow_reference)
      filters.push_back({ReasonCode::reference_only,
                         fmt::format("{} is the reference the others are checked against, "
                                     "hundreds of times slower; it runs only when asked for",
                                     name),
                         "forced by name or allow_reference=true", "not asked for",
                         fmt::format("--backend {} or --allow-reference "
                                     "(MXMOE_BACKEND={} / MXMOE_ALLOW_REFERENCE=1)",
                                     name, name)});
    if (!req.forced_backend.empty() && req.forced_backend != name)
      filters.push_back({ReasonCode::not_forced,
                         fmt::format("the request forces backend {}", req.forced_backend),
                         "no forced backend, or this one", "forced_backend=" + req.forced_backend,
                         "drop --backend / MXMOE_BACKEND to let the oracle choose"});
    s.candidates.push_back(verdict_of(*b, s.deployment, std::move(filters), [&] {
      return ranking_estimate(*b, s.deployment);
    }));
  }

  choose(s, prefs);
  return s;
}

// The single changes of the Request worth trying, smallest first.
std::vector<std::pair<std::string, Request>> single_changes(const Request& r,
                                                            ActivationFormat resolved) {
  std::vector<std::pair<std::string, Request>> changes;
  if (r.batch_invariant) {
    Request c = r;
    c.batch_invariant = false;
    changes.emplace_back("batch_invariant=false", c);
  }
  for (ActivationFormat f : all_activation_formats()) {
    if (f == resolved) continue;
    Request c = r;
    c.activation = f;
    changes.emplace_back(fmt::format("activation={}", to_string(f)), c);
  }
  if (!r.forced_backend.empty()) {
    Request c = r;
    c.forced_backend.clear();
    changes.emplace_back(fmt::format("not forcing backend {}", r.forced_backend), c);
  }
  for (const std::string& name : r.excluded_backends) {
    Request c = r;
    std::erase(c.excluded_backends, name);
    changes.emplace_back(fmt::format("not excluding {}", name), c);
  }
  if (!r.allow_reference) {
    Request c = r;
    c.allow_reference = true;
    changes.emplace_back("allow_reference=true", c);
  }
  if (r.ep_size != 1) {
    Request c = r;
    c.ep_size = 1;
    c.ep_rank = 0;
    c.placement.clear();
    changes.emplace_back("ep_size=1", c);
  }
  return changes;
}

std::vector<Suggestion> suggest(const Selection& failed, const Preferences& prefs,
                                std::span<const Backend* const> candidates) {
  std::vector<Suggestion> out;
  const Deployment& d = failed.deployment;
  for (auto& [change, request] : single_changes(d.request, *d.request.activation)) {
    Deployment changed = d;
    changed.request = request;
    const Selection s = judge_candidates(changed, prefs, candidates);
    if (s.chosen.empty()) continue;
    std::string others;
    for (const Verdict& v : s.candidates)
      if (v.supported && v.name != s.chosen) others += (others.empty() ? "" : ", ") + v.name;
    std::string text = fmt::format("{} would allow {}", change, s.chosen);
    if (change == "allow_reference=true")
      text +=
          " (--allow-reference / MXMOE_ALLOW_REFERENCE=1; the reference, hundreds of times slower)";
    if (!others.empty()) text += fmt::format(" (also {})", others);
    out.push_back({change, s.chosen, std::move(text)});
  }
  return out;
}

}  // namespace

Selection judge(const Deployment& d, const Preferences& prefs,
                std::span<const Backend* const> candidates) {
  Selection s = judge_candidates(d, prefs, candidates);
  if (s.chosen.empty()) s.suggestions = suggest(s, prefs, candidates);
  if (log_enabled(LogCategory::dispatch))
    log_message(LogCategory::dispatch, format_dispatch_log(s).c_str());
  return s;
}

Selection select(const Deployment& d, const Preferences& prefs,
                 std::span<const Backend* const> candidates) {
  Selection s = judge(d, prefs, candidates);
  if (s.chosen.empty()) throw NoBackendError(std::move(s));
  return s;
}

std::vector<std::size_t> rank_supported(
    std::span<const Verdict> verdicts,
    const std::function<std::size_t(std::string_view)>& tie_rank) {
  std::vector<std::size_t> ranked;
  for (std::size_t i = 0; i < verdicts.size(); ++i)
    if (verdicts[i].supported) ranked.push_back(i);
  std::stable_sort(ranked.begin(), ranked.end(), [&](std::size_t a, std::size_t b) {
    const Verdict& va = verdicts[a];
    const Verdict& vb = verdicts[b];
    if (va.estimated_us != vb.estimated_us) return va.estimated_us < vb.estimated_us;
    return tie_rank && tie_rank(va.name) < tie_rank(vb.name);
  });
  return ranked;
}

std::string lowest_cost_why(std::span<const Verdict> verdicts, std::span<const std::size_t> ranked,
                            std::string_view best_cost, std::string_view order) {
  if (ranked.size() == 1)
    return fmt::format("lowest estimated cost: {} (the only supported candidate)", best_cost);
  const Verdict& best = verdicts[ranked[0]];
  const Verdict& next = verdicts[ranked[1]];
  if (next.estimated_us == best.estimated_us)
    return fmt::format("lowest estimated cost: {} (tied with {}; first in the {} order)",
                       best_cost, next.name, order);
  return fmt::format("lowest estimated cost: {} (next: {} {:.1f} us)", best_cost, next.name,
                     next.estimated_us);
}

std::string per_call_cost(const Verdict& v) { return fmt::format("{:.1f} us per call", v.estimated_us); }

NoBackendError::NoBackendError(Selection s)
    : std::runtime_error(format_no_backend_message(s)), selection_(std::move(s)) {}
NoBackendError::NoBackendError(Selection s, const std::string& message)
    : std::runtime_error(message), selection_(std::move(s)) {}

namespace {

// What every rank of a group must judge alike: the layer and the request, except the rank,
// the thread count and the batch-size hint (a rank may hold more tokens than another).
std::string request_mismatch(const Request& a, const Request& b) {
  const auto text = [](const Request& r) {
    Request c = r;
    c.ep_rank = 0;
    c.threads = 0;
    c.tokens_hint = 1;
    return to_json(c);
  };
  return text(a) == text(b) ? "" : fmt::format("request {} vs {}", to_json(a), to_json(b));
}

}  // namespace

Selection agree(std::span<const Selection> ranks, int self, const Preferences& prefs) {
  if (ranks.empty() || self < 0 || self >= static_cast<int>(ranks.size()))
    throw std::invalid_argument(
        fmt::format("agree: rank {} of a group of {} selections", self, ranks.size()));
  const Selection& first = ranks.front();
  for (std::size_t r = 1; r < ranks.size(); ++r) {
    if (!(ranks[r].deployment.layer == first.deployment.layer))
      throw std::invalid_argument(
          fmt::format("the ranks judge different layers: rank 0 has {}, rank {} has {}",
                      to_json(first.deployment.layer), r, to_json(ranks[r].deployment.layer)));
    if (const std::string m =
            request_mismatch(first.deployment.request, ranks[r].deployment.request);
        !m.empty())
      throw std::invalid_argument(
          fmt::format("the ranks judge different requests: rank 0 vs rank {}: {}", r, m));
  }

  Selection s;
  s.deployment = ranks[static_cast<std::size_t>(self)].deployment;
  s.preferences_source = first.preferences_source;
  // Candidates in rank 0's order, then any that only another rank's build has.
  for (const Selection& rank : ranks)
    for (const Verdict& v : rank.candidates)
      if (std::none_of(s.candidates.begin(), s.candidates.end(),
                       [&](const Verdict& c) { return c.name == v.name; }))
        s.candidates.push_back(Verdict{v.name, v.numerics_class, true, {}, 0});
  for (Verdict& merged : s.candidates) {
    std::vector<std::vector<Rejection>> per_rank;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const auto& cs = ranks[r].candidates;
      const auto it = std::find_if(cs.begin(), cs.end(),
                                   [&](const Verdict& v) { return v.name == merged.name; });
      if (it == cs.end()) {
        per_rank.push_back(
            {{ReasonCode::not_compiled,
              fmt::format("backend {} is not registered in this rank's build", merged.name),
              "a build with " + merged.name, "not registered",
              "build every rank from the same sources and options"}});
      } else {
        per_rank.push_back(it->reasons);
        merged.estimated_us = std::max(merged.estimated_us, it->estimated_us);
      }
    }
    // A reason every rank gives is kept as it is; any other names its rank.
    for (std::size_t r = 0; r < per_rank.size(); ++r)
      for (const Rejection& reason : per_rank[r]) {
        const bool everywhere = std::all_of(per_rank.begin(), per_rank.end(), [&](const auto& rs) {
          return std::find(rs.begin(), rs.end(), reason) != rs.end();
        });
        if (everywhere) {
          if (std::find(merged.reasons.begin(), merged.reasons.end(), reason) ==
              merged.reasons.end())
            merged.reasons.push_back(reason);
          continue;
        }
        Rejection named = reason;
        named.detail = fmt::format("rank {}: {}", r, reason.detail);
        merged.reasons.push_back(std::move(named));
      }
    merged.supported = merged.reasons.empty();
    if (!merged.supported) merged.estimated_us = 0;
  }
  choose(s, prefs,
         ranks.size() > 1
             ? fmt::format("agreed by {} ranks (slowest rank's estimate)", ranks.size())
             : "");
  if (s.chosen.empty()) {
    // A change that removes the only reasons some candidate has on every rank would let it
    // run (its rank-local suggestions cannot say so: a rank that could choose has none).
    const Request& r = s.deployment.request;
    const std::pair<ReasonCode, std::string> removable[] = {
        {ReasonCode::not_forced, fmt::format("not forcing backend {}", r.forced_backend)},
        {ReasonCode::batch_invariance, "batch_invariant=false"},
    };
    for (const auto& entry : removable) {
      // (Not a structured binding: clang before 16 cannot capture one in the lambda.)
      const ReasonCode code = entry.first;
      const std::string& change = entry.second;
      std::vector<std::string> allowed;
      for (const Verdict& v : s.candidates)
        if (std::all_of(v.reasons.begin(), v.reasons.end(),
                        [code](const Rejection& why) { return why.code == code; }))
          allowed.push_back(v.name);
      if (allowed.empty()) continue;
      std::string text = fmt::format("{} would allow {}", change, allowed.front());
      if (allowed.size() > 1)
        text += " (also " + fmt::format("{}", fmt::join(allowed.begin() + 1, allowed.end(), ", ")) +
                ")";
      s.suggestions.push_back({change, allowed.front(), std::move(text)});
    }
    for (const Verdict& v : s.candidates)
      if (!v.reasons.empty() &&
          std::all_of(v.reasons.begin(), v.reasons.end(),
                      [](const Rejection& why) { return why.code == ReasonCode::user_excluded; }))
        s.suggestions.push_back({fmt::format("not excluding {}", v.name), v.name,
                                 fmt::format("not excluding {} would allow {}", v.name, v.name)});
  }
  return s;
}

std::string format_rank_reasons(std::span<const Selection> ranks) {
  std::vector<std::string> names;
  for (const Selection& rank : ranks)
    for (const Verdict& v : rank.candidates)
      if (std::find(names.begin(), names.end(), v.name) == names.end()) names.push_back(v.name);
  std::string out;
  for (const std::string& name : names) {
    std::vector<const Verdict*> per_rank;
    for (const Selection& rank : ranks) {
      const auto it = std::find_if(rank.candidates.begin(), rank.candidates.end(),
                                   [&](const Verdict& v) { return v.name == name; });
      per_rank.push_back(it == rank.candidates.end() ? nullptr : &*it);
    }
    // First the reasons every rank gives (once), then each rank's own, rank by rank.
    const auto everywhere = [&](const Rejection& reason) {
      return ranks.size() > 1 &&
             std::all_of(per_rank.begin(), per_rank.end(), [&](const Verdict* v) {
               return v != nullptr &&
                      std::find(v->reasons.begin(), v->reasons.end(), reason) != v->reasons.end();
             });
    };
    for (const Verdict* v : per_rank) {
      if (v == nullptr) continue;
      for (const Rejection& reason : v->reasons)
        if (everywhere(reason))
          out += fmt::format("every rank: {} rejected: {}\n", name, describe_rejection(reason));
      break;
    }
    for (std::size_t r = 0; r < per_rank.size(); ++r) {
      if (per_rank[r] == nullptr) {
        out += fmt::format(
            "rank {}: {} rejected: not_compiled: not registered in this rank's "
            "build\n",
            r, name);
        continue;
      }
      for (const Rejection& reason : per_rank[r]->reasons)
        if (!everywhere(reason))
          out += fmt::format("rank {}: {} rejected: {}\n", r, name, describe_rejection(reason));
    }
  }
  return out;
}

}  // namespace mxmoe
