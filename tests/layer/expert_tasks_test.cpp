// The task numbering of the expert kernels: every (expert, tile) exactly once, in both orders,
// and the order switches on the average slots per expert.
#include "backends/common/expert_tasks.hpp"

#include <gtest/gtest.h>

#include <set>
#include <utility>

namespace mxmoe {
namespace {

TEST(ExpertTasks, EveryExpertTileOnceInBothOrders) {
  for (std::int64_t slots : {1, 40, 41, 5000}) {  // 40 = 8 experts x 5 per pass
    const ExpertTasks tasks(8, 7, slots, 5);
    ASSERT_EQ(tasks.count(), 56);
    std::set<std::pair<std::int64_t, std::int64_t>> seen;
    for (std::int64_t t = 0; t < tasks.count(); ++t) {
      const auto [expert, tile] = tasks(t);
      ASSERT_GE(expert, 0);
      ASSERT_LT(expert, 8);
      ASSERT_GE(tile, 0);
      ASSERT_LT(tile, 7);
      seen.insert({expert, tile});
    }
    EXPECT_EQ(seen.size(), 56u) << slots << " slots";
    // Few slots: consecutive tasks are different experts; many: the same expert.
    const bool round = slots <= 40;
    EXPECT_EQ(tasks(0).expert != tasks(1).expert, round) << slots << " slots";
  }
}

}  // namespace
}  // namespace mxmoe
