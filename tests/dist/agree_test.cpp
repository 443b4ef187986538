// agree(): an expert-parallel group's one selection from every rank's verdicts, and the
// gathered report when no backend runs on every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mxmoe/hardware.hpp"
#include "mxmoe/oracle.hpp"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Every feature a backend of this build can ask for: selection then never depends on the
// machine the test runs on.
mxmoe::Hardware full_hardware(std::string_view cap = "") {
  mxmoe::Hardware hw;
  hw.vendor = "test";
  hw.model = "test CPU";
  hw.logical_cpus = 8;
  hw.source = "test";
  for (std::string_view name : mxmoe::isa_feature_names())
    mxmoe::set_isa_feature(hw.isa, name, true);
  hw.isa = mxmoe::cap_isa(hw.isa, cap);
  hw.isa_cap = std::string(cap);
  return hw;
}

std::vector<mxmoe::Selection> judge_ranks(const std::vector<mxmoe::Hardware>& hardware,
                                          mxmoe::Request request) {
  std::vector<mxmoe::Selection> out;
  const mxmoe::LayerSpec spec = mxmoe::preset("gpt-oss-20b");
  for (std::size_t r = 0; r < hardware.size(); ++r) {
    request.ep_size = static_cast<int>(hardware.size());
    request.ep_rank = static_cast<int>(r);
    out.push_back(mxmoe::judge({spec, hardware[r], request}, mxmoe::preferences_for(spec.family)));
  }
  return out;
}

const mxmoe::Verdict& verdict(const mxmoe::Selection& s, std::string_view name) {
  for (const mxmoe::Verdict& v : s.candidates)
    if (v.name == name) return v;
  throw std::logic_error("no candidate " + std::string(name));
}

const mxmoe::Preferences kPrefs = mxmoe::preferences_for(mxmoe::Family::gpt_oss);

TEST(Agree, OneRankIsItsOwnSelection) {
  const auto ranks = judge_ranks({full_hardware()}, {});
  const mxmoe::Selection s = mxmoe::agree(ranks, 0, kPrefs);
  EXPECT_EQ(s.chosen, ranks[0].chosen);
  EXPECT_EQ(s.candidates, ranks[0].candidates);
  EXPECT_EQ(s.deployment, ranks[0].deployment);
}

TEST(Agree, IdenticalRanksChooseWhatEachWouldAndKeepTheirOwnDeployment) {
  const auto ranks = judge_ranks({full_hardware(), full_hardware(), full_hardware()}, {});
  for (int self = 0; self < 3; ++self) {
    const mxmoe::Selection s = mxmoe::agree(ranks, self, kPrefs);
    EXPECT_EQ(s.chosen, ranks[0].chosen);
    EXPECT_EQ(s.deployment.request.ep_rank, self);
    EXPECT_THAT(s.why, HasSubstr("agreed by 3 ranks"));
    for (const mxmoe::Verdict& v : s.candidates)
      EXPECT_EQ(v.reasons, verdict(ranks[0], v.name).reasons) << v.name;  // no rank prefixes
  }
}

// Rank 2 lacks AVX-512: the group runs a backend every rank can, and the report says why
// the others were dropped, naming rank 2.
TEST(Agree, ACappedRankMovesTheGroupToABackendEveryRankRuns) {
  const auto ranks = judge_ranks({full_hardware(), full_hardware(), full_hardware("avx2")}, {});
  const mxmoe::Selection s = mxmoe::agree(ranks, 0, kPrefs);
  ASSERT_FALSE(s.chosen.empty());
  for (const mxmoe::Selection& r : ranks) EXPECT_TRUE(verdict(r, s.chosen).supported) << s.chosen;
  const mxmoe::Verdict& bf16 = verdict(s, "avx512_bf16");
  EXPECT_FALSE(bf16.supported);
  ASSERT_FALSE(bf16.reasons.empty());
  for (const mxmoe::Rejection& why : bf16.reasons) {
    EXPECT_EQ(why.code, mxmoe::ReasonCode::unsupported_isa);
    EXPECT_THAT(why.detail, HasSubstr("rank 2: "));
  }
  // The estimate is the slowest rank's.
  double slowest = 0;
  for (const mxmoe::Selection& r : ranks)
    slowest = std::max(slowest, verdict(r, s.chosen).estimated_us);
  EXPECT_EQ(verdict(s, s.chosen).estimated_us, slowest);
}

TEST(Agree, AForcedBackendOneRankCannotRunGivesEveryRanksReasons) {
  mxmoe::Request request;
  request.forced_backend = "avx512_bf16";
  // Rank 3 (no SIMD) runs only the judge-only reference backend: allowed here, so that not
  // forcing has a backend every rank runs to suggest.
  request.allow_reference = true;
  const auto ranks = judge_ranks(
      {full_hardware(), full_hardware(), full_hardware("avx2"), full_hardware("none")}, request);
  const mxmoe::Selection s = mxmoe::agree(ranks, 1, kPrefs);
  EXPECT_TRUE(s.chosen.empty());
  const std::string report = mxmoe::format_rank_reasons(ranks);
  EXPECT_THAT(report, HasSubstr("rank 2: avx512_bf16 rejected: unsupported_isa"));
  EXPECT_THAT(report, HasSubstr("rank 3: avx512_bf16 rejected: unsupported_isa"));
  EXPECT_THAT(report, Not(HasSubstr("rank 0: avx512_bf16")));
  EXPECT_THAT(report, Not(HasSubstr("rank 1: avx512_bf16")));
  // A reason every rank gives appears once.
  EXPECT_THAT(report, HasSubstr("every rank: avx2_fp32 rejected: not_forced"));
  EXPECT_THAT(report, Not(HasSubstr("rank 0: avx2_fp32 rejected: not_forced")));
  // Not forcing would let some backend run on every rank.
  ASSERT_FALSE(s.suggestions.empty());
  EXPECT_EQ(s.suggestions[0].change, "not forcing backend avx512_bf16");
}

TEST(Agree, RanksJudgingDifferentThingsAreAnError) {
  auto ranks = judge_ranks({full_hardware(), full_hardware()}, {});
  auto other = ranks;
  other[1].deployment.layer.top_k = 2;
  EXPECT_THAT([&] { mxmoe::agree(other, 0, kPrefs); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("rank 1 has")));
  other = ranks;
  other[1].deployment.request.batch_invariant = true;
  EXPECT_THAT([&] { mxmoe::agree(other, 0, kPrefs); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("rank 0 vs rank 1")));
  // Threads and the token hint may differ between ranks.
  other = ranks;
  other[1].deployment.request.threads = 3;
  other[1].deployment.request.tokens_hint = 9;
  EXPECT_NO_THROW(mxmoe::agree(other, 0, kPrefs));
  EXPECT_THROW(mxmoe::agree(ranks, 2, kPrefs), std::invalid_argument);
}

TEST(Agree, ABackendMissingFromOneRanksBuildIsNotCompiledThere) {
  auto ranks = judge_ranks({full_hardware(), full_hardware()}, {});
  const std::string chosen = ranks[0].chosen;
  auto& c = ranks[1].candidates;
  c.erase(std::find_if(c.begin(), c.end(), [&](const auto& v) { return v.name == chosen; }));
  const mxmoe::Selection s = mxmoe::agree(ranks, 0, kPrefs);
  EXPECT_NE(s.chosen, chosen);
  EXPECT_FALSE(s.chosen.empty());
  const mxmoe::Verdict& gone = verdict(s, chosen);
  ASSERT_EQ(gone.reasons.size(), 1u);
  EXPECT_EQ(gone.reasons[0].code, mxmoe::ReasonCode::not_compiled);
  EXPECT_THAT(gone.reasons[0].detail, HasSubstr("rank 1: "));
}

}  // namespace
