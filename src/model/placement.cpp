// Placement: the expert -> rank table, its default (contiguous ranges) and its JSON form.
#include "mxmoe/placement.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "base/json.hpp"
#include "mxmoe/layer_spec.hpp"

namespace mxmoe {

Placement::Placement(int num_experts, int ranks)
    : owner_(static_cast<std::size_t>(std::max(num_experts, 0)), 0), ranks_(ranks) {}

Placement::Placement(std::vector<int> owner, int ranks) : owner_(std::move(owner)), ranks_(ranks) {
  if (ranks < 1) throw std::invalid_argument(fmt::format("placement: ranks={} (need >= 1)", ranks));
  for (std::size_t e = 0; e < owner_.size(); ++e)
    if (owner_[e] < 0 || owner_[e] >= ranks)
      throw std::invalid_argument(fmt::format(
          "placement: expert {} is placed on rank {}, outside [0, {})", e, owner_[e], ranks));
}

Placement Placement::contiguous(int num_experts, int ranks) {
  if (num_experts < 0 || ranks < 1)
    throw std::invalid_argument(
        fmt::format("placement: need num_experts >= 0 and ranks >= 1; got num_experts={}, ranks={}",
                    num_experts, ranks));
  Placement p(num_experts, ranks);
  // Rank r starts at floor(r * E / n): expert e belongs to the last rank whose start is <= e.
  for (int r = 0; r < ranks; ++r) {
    const auto begin = static_cast<int>(std::int64_t{r} * num_experts / ranks);
    const auto end = static_cast<int>(std::int64_t{r + 1} * num_experts / ranks);
    for (int e = begin; e < end; ++e) p.owner_[static_cast<std::size_t>(e)] = r;
  }
  return p;
}

std::vector<int> Placement::experts_of(int rank) const {
  std::vector<int> out;
  for (std::size_t e = 0; e < owner_.size(); ++e)
    if (owner_[e] == rank) out.push_back(static_cast<int>(e));
  return out;
}

int Placement::count(int rank) const noexcept {
  return static_cast<int>(std::count(owner_.begin(), owner_.end(), rank));
}

std::vector<ExpertRange> Placement::runs(int rank) const {
  std::vector<ExpertRange> out;
  for (int e = 0; e < num_experts(); ++e) {
    if (owner(e) != rank) continue;
    if (!out.empty() && out.back().end == e)
      ++out.back().end;
    else
      out.push_back({e, e + 1});
  }
  return out;
}

std::string to_json(const Placement& p) {
  return json::Json{{"ranks", p.ranks()}, {"owner", p.owners()}}.dump();
}

Placement placement_from_json(std::string_view text) {
  constexpr std::string_view what = "placement";
  const json::Json j = json::parse_strict(text, what);
  json::expect_keys(j, what, {"ranks", "owner"});
  // Integers only, each within range: never a float or a huge value wrapped into an int.
  const int ranks = static_cast<int>(json::get_integer(j, what, "ranks", 1, kMaxExperts));
  std::vector<int> owner;
  for (const std::int64_t r :
       json::get_integer_array(j, what, "owner", 0, kMaxExperts - 1, kMaxExperts))
    owner.push_back(static_cast<int>(r));
  return Placement(std::move(owner), ranks);
}

}  // namespace mxmoe
