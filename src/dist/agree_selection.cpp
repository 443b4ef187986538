// agree_selection: every rank judges its own deployment; the verdicts travel as JSON (the
// Selection's own form) to every rank, and each computes the same agreement from them.
#include <fmt/core.h>

#include "mxmoe/expert_parallel.hpp"
#include "mxmoe/oracle.hpp"

namespace mxmoe {

Selection agree_selection(const Deployment& mine, const Preferences& prefs, Communicator& comm) {
  // A rank whose judge() throws still takes part, so that every rank learns why.
  std::string mine_text, error;
  try {
    mine_text = to_json(judge(mine, prefs));
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  const std::vector<std::string> texts =
      allgather_strings(comm, error.empty() ? mine_text : "!" + error);
  std::vector<Selection> ranks;
  std::string errors;
  for (std::size_t r = 0; r < texts.size(); ++r) {
    if (!texts[r].empty() && texts[r][0] == '!') {
      errors += fmt::format("{}rank {}: {}", errors.empty() ? "" : "; ", r, texts[r].substr(1));
      continue;
    }
    try {
      ranks.push_back(selection_from_json(texts[r]));
    } catch (const std::invalid_argument& e) {
      throw CommError(
          {static_cast<int>(r)},
          fmt::format("rank {}: rank {} sent a malformed selection: {}", comm.rank(), r, e.what()));
    }
  }
  if (!errors.empty())
    throw std::invalid_argument("the expert-parallel group cannot judge its deployment: " + errors);
  Selection agreed = agree(ranks, comm.rank(), prefs);
  if (agreed.chosen.empty()) {
    std::string message = fmt::format(
        "No MXFP4 MoE backend supports the deployment configuration on every rank of the "
        "expert-parallel group ({} ranks). Every rank's reasons:\n{}",
        ranks.size(), format_rank_reasons(ranks));
    for (const Suggestion& g : agreed.suggestions) message += "suggestion: " + g.text + "\n";
    throw NoBackendError(std::move(agreed), message);
  }
  return agreed;
}

}  // namespace mxmoe
