// Which rank of an expert-parallel group holds each routed expert of a layer. One type owns
// the table, and one function (placement_of, mxmoe/deployment.hpp) turns a Request into it, so
// every part of mxmoe (the layer, the oracle's cost and memory figures, the tools) agrees on
// who holds what.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/export.h"

namespace mxmoe {

// Experts [begin, end) of a layer.
struct MXMOE_API ExpertRange {
  int begin = 0, end = 0;
  int size() const noexcept { return end - begin; }
  bool contains(int expert) const noexcept { return expert >= begin && expert < end; }
  friend bool operator==(const ExpertRange&, const ExpertRange&) = default;
};

// A table expert -> rank over `ranks` ranks. A rank may hold any set of experts (a balancer
// may place hot experts apart), none at all, or every one; each expert has exactly one owner.
class MXMOE_API Placement {
 public:
  // One rank holding every expert of a layer with num_experts experts.
  explicit Placement(int num_experts = 0) : Placement(num_experts, 1) {}
  // owner[e] is the rank of expert e. Throws std::invalid_argument naming the first entry
  // outside [0, ranks), or when ranks < 1.
  Placement(std::vector<int> owner, int ranks);

  // The default: contiguous ranges as even as possible, rank r holding [r*E/n, (r+1)*E/n)
  // (sizes differ by at most one; 32 experts on 3 ranks: 10, 11, 11). Uneven splits are
  // fine. Throws std::invalid_argument unless ranks >= 1 and num_experts >= 0.
  static Placement contiguous(int num_experts, int ranks);

  int num_experts() const noexcept { return static_cast<int>(owner_.size()); }
  int ranks() const noexcept { return ranks_; }
  int owner(int expert) const noexcept { return owner_[static_cast<std::size_t>(expert)]; }
  const std::vector<int>& owners() const noexcept { return owner_; }
  // The experts of `rank`, ascending; how many; and as maximal runs of consecutive experts
  // (one run for a contiguous placement; a kernel is created per run).
  std::vector<int> experts_of(int rank) const;
  int count(int rank) const noexcept;
  std::vector<ExpertRange> runs(int rank) const;
  bool holds_all(int rank) const noexcept { return count(rank) == num_experts(); }

  friend bool operator==(const Placement&, const Placement&) = default;

 private:
  Placement(int num_experts, int ranks);  // every expert on rank 0
  std::vector<int> owner_;
  int ranks_ = 1;
};

// JSON form (strict dialect): {"ranks": N, "owner": [rank of expert 0, rank of expert 1, ...]}.
MXMOE_API std::string to_json(const Placement&);
MXMOE_API Placement placement_from_json(std::string_view text);  // throws std::invalid_argument

}  // namespace mxmoe
