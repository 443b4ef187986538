// judge() and select(): the one selection path. Every candidate is judged with its own
// check(); the request's filters (exclusions, a forced backend) add their reasons on top of
// the candidate's own, so a report always shows everything that stands in the way.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "mxmoe/log.hpp"
#include "mxmoe/oracle.hpp"
#include "oracle/report.hpp"

namespace mxmoe {
namespace {

bool contains(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

void check_known_name(const std::string& name, std::span<const Backend* const> candidates,
                      std::string_view role) {
  for (const Backend* b : candidates)
    if (b->name() == name) return;
  const std::string valid = backend_names(candidates);
  throw std::invalid_argument(fmt::format("unknown backend '{}' ({}); valid backends: {}", name,
                                          role, valid.empty() ? "none registered" : valid));
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

double ranking_estimate(const Backend& b, const Deployment& d) {
  if (!d.request.batch_invariant) return b.estimate_us(d);
  Deployment at = d;
  double sum = 0;
  for (int tokens : kInvariantMix) {
    at.request.tokens_hint = tokens;
    sum += b.estimate_us(at);
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

// Judges every candidate and chooses; no suggestions (those re-run this function).
Selection judge_candidates(const Deployment& d, const Preferences& prefs,
                           std::span<const Backend* const> candidates) {
  const Request& req = d.request;
  if (!req.forced_backend.empty())
    check_known_name(req.forced_backend, candidates, "forced by --backend / MXMOE_BACKEND");
  for (const std::string& name : req.excluded_backends)
    check_known_name(name, candidates, "excluded by --exclude / MXMOE_EXCLUDE_BACKENDS");

  Selection s;
  s.deployment = d;
  if (!s.deployment.request.activation) s.deployment.request.activation = prefs.default_activation;
  s.preferences_source = prefs.source;

  for (const Backend* b : candidates) {
    Verdict v;
    v.name = std::string(b->name());
    v.reasons = b->check(s.deployment);
    if (contains(req.excluded_backends, v.name))
      v.reasons.push_back({ReasonCode::user_excluded, "the request excludes this backend",
                           "not excluded", "excluded",
                           "remove it from --exclude / MXMOE_EXCLUDE_BACKENDS"});
    if (b->judge_only() && req.forced_backend != v.name && !req.allow_judge_only)
      v.reasons.push_back({ReasonCode::judge_only,
                           fmt::format("{} is a judge of the other backends, hundreds of times "
                                       "slower; it runs only when asked for",
                                       v.name),
                           "forced by name or allow_judge_only=true", "not asked for",
                           fmt::format("--backend {} or --allow-reference "
                                       "(MXMOE_BACKEND={} / MXMOE_ALLOW_REFERENCE=1)",
                                       v.name, v.name)});
    if (!req.forced_backend.empty() && req.forced_backend != v.name)
      v.reasons.push_back({ReasonCode::not_forced,
                           fmt::format("the request forces backend {}", req.forced_backend),
                           "no forced backend, or this one", "forced_backend=" + req.forced_backend,
                           "drop --backend / MXMOE_BACKEND to let the oracle choose"});
    v.supported = v.reasons.empty();
    if (v.supported) v.estimated_us = ranking_estimate(*b, s.deployment);
    s.candidates.push_back(std::move(v));
  }

  std::vector<std::size_t> ranked;
  for (std::size_t i = 0; i < s.candidates.size(); ++i)
    if (s.candidates[i].supported) ranked.push_back(i);
  if (ranked.empty()) return s;
  std::stable_sort(ranked.begin(), ranked.end(), [&](std::size_t a, std::size_t b) {
    const Verdict& va = s.candidates[a];
    const Verdict& vb = s.candidates[b];
    if (va.estimated_us != vb.estimated_us) return va.estimated_us < vb.estimated_us;
    return preference_rank(prefs, va.name) < preference_rank(prefs, vb.name);
  });

  const Verdict& best = s.candidates[ranked.front()];
  s.chosen = best.name;
  if (!req.forced_backend.empty()) {
    s.why = fmt::format("forced by the request (--backend / MXMOE_BACKEND); estimated {}",
                        cost_text(best, req));
  } else if (ranked.size() == 1) {
    s.why = fmt::format("lowest estimated cost: {} (the only supported candidate)",
                        cost_text(best, req));
  } else {
    const Verdict& next = s.candidates[ranked[1]];
    if (next.estimated_us == best.estimated_us)
      s.why = fmt::format("lowest estimated cost: {} (tied with {}; first in the {} order)",
                          cost_text(best, req), next.name, prefs.source);
    else
      s.why = fmt::format("lowest estimated cost: {} (next: {} {:.1f} us)", cost_text(best, req),
                          next.name, next.estimated_us);
  }
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
  if (!r.allow_judge_only) {
    Request c = r;
    c.allow_judge_only = true;
    changes.emplace_back("allow_judge_only=true", c);
  }
  if (r.ep_size != 1) {
    Request c = r;
    c.ep_size = 1;
    c.ep_rank = 0;
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
    if (change == "allow_judge_only=true")
      text += " (--allow-reference / MXMOE_ALLOW_REFERENCE=1; a judge, hundreds of times slower)";
    if (!others.empty()) text += fmt::format(" (also {})", others);
    out.push_back({change, s.chosen, std::move(text)});
  }
  return out;
}

}  // namespace

std::string backend_names(std::span<const Backend* const> candidates) {
  std::string names;
  for (const Backend* b : candidates) names += (names.empty() ? "" : ", ") + std::string(b->name());
  return names;
}

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

NoBackendError::NoBackendError(Selection s)
    : std::runtime_error(format_no_backend_message(s)), selection_(std::move(s)) {}

NoBackendError::NoBackendError(Selection s, const std::string& message)
    : std::runtime_error(message), selection_(std::move(s)) {}

}  // namespace mxmoe
