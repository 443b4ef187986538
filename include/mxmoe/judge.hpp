// The oracle: one selector judges every candidate it is handed on every predicate and keeps
// every reason as a structured record. There is no other selection path: model families
// pass their preferences into the same select() as data. A host's candidates are the
// registered backends (their names: mxmoe/registry.hpp); inside the library, tests and tools
// hand their own. The same verdict and ranking functions judge the dense kernels of a whole
// model, which have no Request.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "mxmoe/deployment.hpp"
#include "mxmoe/export.h"
#include "mxmoe/selection.hpp"

namespace mxmoe {

// A model family's wishes, as data: the activation format used when the Request leaves it
// unset, and an ordering that breaks ties between candidates of equal estimated cost.
struct MXMOE_API Preferences {
  std::string source = "default";  // "gpt_oss family", for reports
  ActivationFormat default_activation = kDefaultActivation;
  // Backend names, preferred first; ties between unlisted ones (all of them when empty, as
  // for every family today) follow the candidates' order, the registry's best-known-first.
  std::vector<std::string> order;
};
MXMOE_API Preferences preferences_for(Family family);

// Judges every registered backend. Never throws for lack of a backend: returns chosen == ""
// then. Throws std::invalid_argument for an unknown forced/excluded backend name (message
// lists the valid names). With the dispatch log category on (MXMOE_VERBOSE=dispatch,
// log.hpp), it logs one line per candidate.
MXMOE_API Selection judge(const Deployment& d, const Preferences& prefs);

// judge(), then throws NoBackendError (mxmoe/no_backend_error.hpp) when nothing fits.
MXMOE_API Selection select(const Deployment& d, const Preferences& prefs);

// An expert-parallel group's one selection, from every rank's judge() (ranks[r] is rank r's;
// each rank judges its own Hardware). A candidate is supported when every rank supports it;
// its reasons are every rank's (one that every rank gives is kept as is, any other gets its
// detail prefixed "rank R: "); its estimate is the slowest rank's; the choice then follows
// judge()'s rules. The result carries ranks[self].deployment, and chosen == "" when no
// candidate runs on every rank. Every rank computes the same choice from the same inputs, so
// the group runs one backend (one numerics class, as a batch-invariant request needs).
// Throws std::invalid_argument when the ranks judged different layers or requests (other than
// ep_rank, threads and tokens_hint), naming the rank.
MXMOE_API Selection agree(std::span<const Selection> ranks, int self, const Preferences& prefs);

}  // namespace mxmoe
