#include "perf/workload.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <stdexcept>
#include <vector>

namespace mxmoe::perf {
namespace {

LayerSpec shape(int experts, int top_k, int hidden, int intermediate) {
  LayerSpec s;
  s.name = "test";
  s.num_experts = experts;
  s.top_k = top_k;
  s.hidden = hidden;
  s.intermediate = intermediate;
  return s;
}

TEST(WeightBytes, GptOss20bExpertByHand) {
  const LayerSpec s = shape(32, 4, 2880, 2880);
  // W1 [5760, 2880]: 5760 rows x (1440 packed + 90 scale) bytes = 8,812,800
  // W2 [2880, 2880]: 2880 rows x (1440 + 90)               = 4,406,400
  EXPECT_EQ(expert_weight_bytes(s), 13'219'200u);
  EXPECT_EQ(shared_weight_bytes(s), 0u);
  EXPECT_EQ(touched_weight_bytes(s, 4), 4u * 13'219'200u);
  EXPECT_EQ(layer_weight_bytes(s), 32u * 13'219'200u);
}

TEST(WeightBytes, SmallShapeWithSharedExpertByHand) {
  LayerSpec s = shape(8, 2, 64, 32);
  s.shared_experts = 1;
  s.shared_intermediate = 96;
  // W1 [64, 64]: 64 x (32 + 2) = 2176; W2 [64, 32]: 64 x (16 + 1) = 1088
  EXPECT_EQ(expert_weight_bytes(s), 3264u);
  // shared W1 [192, 64]: 192 x 34 = 6528; W2 [64, 96]: 64 x (48 + 3) = 3264
  EXPECT_EQ(shared_weight_bytes(s), 9792u);
  EXPECT_EQ(touched_weight_bytes(s, 3), 3u * 3264u + 9792u);
  EXPECT_EQ(layer_weight_bytes(s), 8u * 3264u + 9792u);
}

TEST(Flops, HandWorked) {
  const LayerSpec s = shape(32, 4, 2880, 2880);
  // 2 x 512 x 4 x 3 x 2880 x 2880 = 101,921,587,200
  EXPECT_DOUBLE_EQ(layer_flops(s, 512), 101'921'587'200.0);
  LayerSpec shared = shape(8, 2, 64, 32);
  shared.shared_experts = 1;
  shared.shared_intermediate = 96;
  // 2 x 3 x (2 x 3 x 64 x 32 + 3 x 64 x 96) = 6 x (12288 + 18432) = 184,320
  EXPECT_DOUBLE_EQ(layer_flops(shared, 3), 184'320.0);
}

TEST(DistinctExperts, CountsEachOnceAndIgnoresOutOfRange) {
  const std::vector<std::int32_t> ids{3, 1, 3, 7, 1, -1, 8, 0};
  EXPECT_EQ(count_distinct_experts(ids, 8), 4);  // 0 1 3 7
  EXPECT_EQ(count_distinct_experts(std::vector<std::int32_t>{}, 8), 0);
}

TEST(CopyPlan, StreamsPastFourTimesTheCache) {
  const std::uint64_t per_copy = 32u * 13'219'200u;  // 423,014,400
  const std::uint64_t l3 = 480ull << 20;             // 503,316,480
  // 4 x L3 / per_copy = 4.76 -> 5 copies; a 2 GiB budget affords 5.07 -> 5.
  const CopyPlan p = plan_copies(per_copy, l3, 2ull << 30, false);
  EXPECT_EQ(p.copies, 5);
  EXPECT_EQ(p.total_bytes, 5 * per_copy);
  EXPECT_NEAR(p.llc_multiple, 5.0 * 423'014'400 / 503'316'480, 1e-12);
  EXPECT_EQ(p.mode, "streaming: 5 copies, 2.12 GB (4.2x LLC)");
}

TEST(CopyPlan, BudgetAndCacheResidentLimitTheCopies) {
  const std::uint64_t per_copy = 400u << 20;
  EXPECT_EQ(plan_copies(per_copy, 480ull << 20, 1ull << 30, false).copies, 2);
  EXPECT_NE(plan_copies(per_copy, 480ull << 20, 1ull << 30, false).mode.find("below 4x LLC"),
            std::string::npos);
  EXPECT_EQ(plan_copies(per_copy, 480ull << 20, 100, false).copies, 1);
  const CopyPlan resident = plan_copies(per_copy, 480ull << 20, 8ull << 30, true);
  EXPECT_EQ(resident.copies, 1);
  EXPECT_EQ(resident.mode.rfind("cache-resident: 1 copy", 0), 0u);
}

TEST(BalancedRouting, DistinctPerTokenAndWeightsSumToOne) {
  for (auto [experts, k] : {std::pair{8, 3}, std::pair{32, 4}, std::pair{4, 4}, std::pair{5, 1}}) {
    BalancedRouting routing(experts, k, 7);
    const int tokens = 37;
    std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * k));
    std::vector<float> w(ids.size());
    for (int call = 0; call < 3; ++call) {
      routing.fill(tokens, ids.data(), w.data());
      for (int t = 0; t < tokens; ++t) {
        const auto* row = ids.data() + t * k;
        const std::set<std::int32_t> distinct(row, row + k);
        EXPECT_EQ(static_cast<int>(distinct.size()), k);
        EXPECT_GE(*distinct.begin(), 0);
        EXPECT_LT(*distinct.rbegin(), experts);
        double sum = 0;
        for (int j = 0; j < k; ++j) {
          EXPECT_GT(w[static_cast<std::size_t>(t * k + j)], 0.0f);
          sum += static_cast<double>(w[static_cast<std::size_t>(t * k + j)]);
        }
        EXPECT_NEAR(sum, 1.0, 1e-6);  // k float additions of values <= 1
      }
    }
  }
}

TEST(BalancedRouting, DecodeCallsVisitEveryExpertBeforeReusingOne) {
  // One token, top-4 of 32: eight successive calls read the first permutation in order.
  BalancedRouting routing(32, 4, 11);
  std::set<std::int32_t> seen;
  std::vector<std::int32_t> ids(4);
  std::vector<float> w(4);
  for (int call = 0; call < 8; ++call) {
    routing.fill(1, ids.data(), w.data());
    seen.insert(ids.begin(), ids.end());
  }
  EXPECT_EQ(seen.size(), 32u);
}

TEST(BalancedRouting, LargeBatchLoadsExpertsEvenly) {
  BalancedRouting routing(32, 4, 3);
  std::vector<std::int32_t> ids(512 * 4);
  std::vector<float> w(ids.size());
  routing.fill(512, ids.data(), w.data());
  std::vector<int> load(32, 0);
  for (std::int32_t id : ids) ++load[static_cast<std::size_t>(id)];
  // 2048 slots over 32 experts = 64 each; deferrals move a few picks by one permutation.
  EXPECT_LE(
      *std::max_element(load.begin(), load.end()) - *std::min_element(load.begin(), load.end()), 4);
}

TEST(BalancedRouting, RejectsImpossibleTopK) {
  EXPECT_THROW(BalancedRouting(4, 5, 1), std::invalid_argument);
  EXPECT_THROW(BalancedRouting(4, 0, 1), std::invalid_argument);
}

TEST(ParseLists, CommaListsOfIntegersInARange) {
  const auto parse = [](const std::string& text) {
    return parse_int_list(text, "--tokens", 1, 1'000'000'000);
  };
  EXPECT_EQ(parse("1,8,64,512"), (std::vector<int>{1, 8, 64, 512}));
  EXPECT_EQ(parse(" 2 , 1"), (std::vector<int>{2, 1}));
  EXPECT_EQ(parse("8,1,8"), (std::vector<int>{8, 1}));
  for (const char* bad : {"", "0", "-1", "1,,2", "1,", "x", "1x", "3.5", "99999999999"})
    EXPECT_THROW(parse(bad), std::invalid_argument) << bad;
  try {
    parse("1,y");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--tokens: 'y'"), std::string::npos) << e.what();
  }
  // Thread lists: 0 (all CPUs) is legal, the bound is not exceeded.
  EXPECT_EQ(parse_int_list("0,2", "--threads", 0, 1024), (std::vector<int>{0, 2}));
  try {
    parse_int_list("100000", "--threads", 0, 1024);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[0, 1024]"), std::string::npos) << e.what();
  }
}

TEST(ParseLists, CommaListsOfNames) {
  EXPECT_EQ(parse_name_list("auto,avx2, reference", "--backend"),
            (std::vector<std::string>{"auto", "avx2", "reference"}));
  EXPECT_EQ(parse_name_list("bf16,bf16", "--activation"), (std::vector<std::string>{"bf16"}));
  for (const char* bad : {"", ",", "a,,b", "a,"})
    EXPECT_THROW(parse_name_list(bad, "--backend"), std::invalid_argument) << bad;
}

}  // namespace
}  // namespace mxmoe::perf
