// Placement: the expert -> rank table, its default, its JSON form, and what the oracle makes
// of it (uneven splits accepted, malformed tables refused, a choice that does not depend on
// the EP size).
#include "mxmoe/placement.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "layer/layer_fixture.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/oracle.hpp"

namespace {

using mxmoe::ExpertRange;
using mxmoe::Placement;
using ::testing::HasSubstr;

TEST(Placement, ContiguousRangesCoverEveryExpertOnceAsEvenlyAsPossible) {
  for (int experts : {0, 1, 7, 32, 256})
    for (int n : {1, 2, 3, 4, 8, 33}) {
      const Placement p = Placement::contiguous(experts, n);
      ASSERT_EQ(p.num_experts(), experts);
      ASSERT_EQ(p.ranks(), n);
      int smallest = experts, largest = 0, covered = 0;
      for (int r = 0; r < n; ++r) {
        smallest = std::min(smallest, p.count(r));
        largest = std::max(largest, p.count(r));
        covered += p.count(r);
        // One run per rank, [r*E/n, (r+1)*E/n), and the owner table agrees with it.
        const std::vector<ExpertRange> runs = p.runs(r);
        const ExpertRange want{r * experts / n, (r + 1) * experts / n};
        if (want.size() == 0) {
          EXPECT_TRUE(runs.empty());
        } else {
          ASSERT_EQ(runs.size(), 1u);
          EXPECT_EQ(runs[0], want) << experts << " experts, rank " << r << " of " << n;
        }
        for (int e : p.experts_of(r)) EXPECT_EQ(p.owner(e), r);
      }
      EXPECT_EQ(covered, experts);
      if (experts > 0) {
        EXPECT_LE(largest - smallest, 1) << experts << " experts on " << n;
      }
    }
  // 32 experts on 3 ranks: 10, 11, 11.
  const Placement p = Placement::contiguous(32, 3);
  EXPECT_EQ(p.runs(0)[0], (ExpertRange{0, 10}));
  EXPECT_EQ(p.runs(1)[0], (ExpertRange{10, 21}));
  EXPECT_EQ(p.runs(2)[0], (ExpertRange{21, 32}));
  EXPECT_THROW(Placement::contiguous(32, 0), std::invalid_argument);
  EXPECT_THROW(Placement::contiguous(-1, 2), std::invalid_argument);
}

TEST(Placement, AnyTableWithRunsForEachRank) {
  const Placement p({2, 0, 0, 2, 1, 2, 2, 0}, 4);  // rank 3 holds nothing
  EXPECT_EQ(p.experts_of(0), (std::vector<int>{1, 2, 7}));
  EXPECT_EQ(p.experts_of(2), (std::vector<int>{0, 3, 5, 6}));
  EXPECT_EQ(p.count(3), 0);
  EXPECT_TRUE(p.runs(3).empty());
  EXPECT_EQ(p.runs(0), (std::vector<ExpertRange>{{1, 3}, {7, 8}}));
  EXPECT_EQ(p.runs(2), (std::vector<ExpertRange>{{0, 1}, {3, 4}, {5, 7}}));
  EXPECT_FALSE(p.holds_all(0));
  EXPECT_TRUE(Placement(5).holds_all(0));
  EXPECT_THAT(
      [] {
        Placement({0, 4}, 4);
      },
      ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("expert 1 is placed on rank 4")));
  EXPECT_THROW(Placement(std::vector<int>{0, -1}, 2), std::invalid_argument);
  EXPECT_THROW(Placement(std::vector<int>{0}, 0), std::invalid_argument);
}

TEST(Placement, JsonRoundTripInTheStrictDialect) {
  const Placement p({1, 0, 2, 2, 1}, 3);
  EXPECT_EQ(mxmoe::placement_from_json(mxmoe::to_json(p)), p);
  EXPECT_EQ(mxmoe::to_json(Placement::contiguous(4, 2)), R"({"ranks":2,"owner":[0,0,1,1]})");
  for (const char* bad : {R"({"ranks": 2})", R"({"ranks": 2, "owner": [0], "x": 1})",
                          R"({"ranks": 2, "owner": [0, 2]})", R"({"ranks": 0, "owner": []})",
                          R"({"ranks": 2, "ranks": 3, "owner": [0]})",
                          R"({"ranks": "2", "owner": [0]})", R"([0, 1])", "{"})
    EXPECT_THROW(mxmoe::placement_from_json(bad), std::invalid_argument) << bad;
  // Integers only, within range: a float, a boolean or a huge value is never converted (they
  // were read as rank 1, 1, 0, 1 and 2 by a plain get<int>).
  for (const char* bad :
       {R"({"ranks": 2, "owner": [1.5]})", R"({"ranks": 2, "owner": [true]})",
        R"({"ranks": 2, "owner": [9223372036854775808]})", R"({"ranks": 2, "owner": [4294967297]})",
        R"({"ranks": 4294967298, "owner": [0]})", R"({"ranks": 2.7, "owner": [0]})",
        R"({"ranks": 65537, "owner": [0]})", R"({"ranks": 2, "owner": [1e30]})"}) {
    try {
      (void)mxmoe::placement_from_json(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("expected an integer in")) << bad;
    }
  }
}

TEST(Placement, PlacementOfARequest) {
  mxmoe::Request r;
  r.ep_size = 3;
  EXPECT_EQ(mxmoe::placement_of(r, 32), Placement::contiguous(32, 3));
  r.placement = {0, 1, 2, 1};
  EXPECT_EQ(mxmoe::placement_of(r, 4), Placement({0, 1, 2, 1}, 3));
  EXPECT_THAT([&] { mxmoe::placement_of(r, 5); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  HasSubstr("the placement lists 4 experts, the layer has 5")));
  r.ep_size = 2;  // rank 2 does not exist any more
  EXPECT_THROW(mxmoe::placement_of(r, 4), std::invalid_argument);
}

mxmoe::Deployment deployment(int ep_size, int ep_rank) {
  mxmoe::Deployment d;
  d.layer = mxmoe::preset("gpt-oss-20b");
  d.hardware = mxmoe::probe_hardware();
  d.request.ep_size = ep_size;
  d.request.ep_rank = ep_rank;
  return d;
}

TEST(PlacementOracle, UnevenSplitsAreAcceptedMalformedTablesAreNot) {
  const mxmoe::Preferences prefs = mxmoe::preferences_for(mxmoe::Family::gpt_oss);
  for (int n : {3, 5, 7, 33})  // 32 experts, uneven; 33 ranks: one rank holds none
    for (int r : {0, n - 1}) {
      const mxmoe::Selection s = mxmoe::judge(deployment(n, r), prefs);
      for (const mxmoe::Verdict& v : s.candidates)
        for (const mxmoe::Rejection& why : v.reasons)
          EXPECT_NE(why.code, mxmoe::ReasonCode::expert_parallel) << why.detail;
    }
  mxmoe::Deployment bad = deployment(2, 0);
  bad.request.placement = {0, 1};  // 2 entries for 32 experts
  const mxmoe::Selection s = mxmoe::judge(bad, prefs);
  EXPECT_TRUE(s.chosen.empty());
  for (const mxmoe::Verdict& v : s.candidates) {
    const bool named = std::any_of(v.reasons.begin(), v.reasons.end(), [](const auto& why) {
      return why.code == mxmoe::ReasonCode::expert_parallel &&
             why.detail.find("the placement lists 2 experts, the layer has 32") !=
                 std::string::npos;
    });
    EXPECT_TRUE(named) << v.name;
  }
}

// The choice, and the estimate that ranks it, are the whole layer's: an EP rank of any group
// picks what one process picks, so the output bits cannot depend on the EP size.
TEST(PlacementOracle, TheChoiceDoesNotDependOnTheEpSizeOrPlacement) {
  const mxmoe::Preferences prefs = mxmoe::preferences_for(mxmoe::Family::gpt_oss);
  for (bool invariant : {false, true})
    for (int tokens : {1, 64, 512}) {
      mxmoe::Deployment one = deployment(1, 0);
      one.request.batch_invariant = invariant;
      one.request.tokens_hint = tokens;
      const mxmoe::Selection whole = mxmoe::judge(one, prefs);
      for (int n : {2, 3, 8})
        for (int r : {0, n - 1}) {
          mxmoe::Deployment d = deployment(n, r);
          d.request.batch_invariant = invariant;
          d.request.tokens_hint = tokens;
          if (n == 3) d.request.placement = std::vector<int>(32, r);  // rank r holds all
          const mxmoe::Selection s = mxmoe::judge(d, prefs);
          EXPECT_EQ(s.chosen, whole.chosen) << n << " ranks, rank " << r << ", " << tokens;
          for (std::size_t i = 0; i < s.candidates.size(); ++i)
            EXPECT_EQ(s.candidates[i].estimated_us, whole.candidates[i].estimated_us);
        }
    }
}

}  // namespace
