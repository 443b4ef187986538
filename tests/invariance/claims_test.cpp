// The oracle side of batch invariance: every claim is covered by the suite, unclaimed
// formats are refused with the batch_invariance code and a remedy, the scale rule holds, and
// backends the oracle may pick for one request at different batch sizes give the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "backends/registry.hpp"
#include "contract/capabilities.hpp"
#include "invariance_fixture.hpp"
#include "test_runtime.hpp"
#include "verify/invariance.hpp"

namespace invariance_test {
namespace {

using mxmoe::ActivationFormat;
using mxmoe::all_activation_formats;
using mxmoe::Backend;
using mxmoe::ReasonCode;

bool covered(std::string_view backend, ActivationFormat f) {
  return std::any_of(covered_claims().begin(), covered_claims().end(),
                     [&](const Claim& c) { return c.backend == backend && c.format == f; });
}

// Hardware with every ISA feature, so claims of backends this machine cannot run are seen too.
mxmoe::Deployment everything_deployment(ActivationFormat f, bool batch_invariant) {
  mxmoe::Deployment d = deployment(small_spec(), f, batch_invariant);
  d.hardware.os_denied.clear();
  for (std::string_view name : mxmoe::isa_feature_names())
    mxmoe::set_isa_feature(d.hardware.isa, name, true);
  return d;
}

// Table: registered backends x formats. Accepting batch_invariant=true implies the suite
// covers the pair; accepting the format but not invariance means exactly one
// batch_invariance rejection with a remedy.
TEST(Claims, EveryAcceptedInvariantFormatIsCoveredOrRefusedWithRemedy) {
  for (const Backend* b : mxmoe::registered_backends()) {
    for (ActivationFormat f : all_activation_formats()) {
      SCOPED_TRACE(claim_name(b->name(), f));
      const auto plain = b->check(everything_deployment(f, false));
      const auto invariant = b->check(everything_deployment(f, true));
      if (invariant.empty()) {
        EXPECT_TRUE(covered(b->name(), f)) << "claims invariance but tests/invariance does not "
                                              "cover it: add it to covered_claims()";
        continue;
      }
      if (!plain.empty()) continue;  // the format itself is refused: nothing to claim
      ASSERT_EQ(invariant.size(), 1u);
      EXPECT_EQ(invariant.front().code, ReasonCode::batch_invariance);
      EXPECT_NE(invariant.front().remedy.find("batch_invariant=false"), std::string::npos)
          << invariant.front().remedy;
      EXPECT_FALSE(covered(b->name(), f)) << "covered but not claimed";
    }
  }
}

// Every covered claim is one the backend really makes (no stale entry hides a dropped claim).
TEST(Claims, EveryCoveredClaimIsAccepted) {
  for (const Claim& c : covered_claims()) {
    const Backend* b = mxmoe::find_backend(c.backend);
    ASSERT_NE(b, nullptr) << c.backend;
    // On a machine with every feature, only this build's architecture may stand in the way
    // (the other architecture's backends are not compiled here).
    for (const mxmoe::Rejection& r : b->check(everything_deployment(c.format, true)))
      EXPECT_EQ(r.code, ReasonCode::not_compiled)
          << claim_name(c.backend, c.format) << ": " << r.detail;
  }
}

// A request the fast backends do not claim (mxfp8 invariant): only the judge (reference)
// claims it, and the oracle never picks it silently (it is hundreds of times slower): exit 3
// with a suggestion naming it. Allowed explicitly, it is chosen; the others are refused with
// batch_invariance.
TEST(Claims, JudgeRefusesUnclaimedFormatsWithTheCode) {
  mxmoe::Deployment d = deployment(small_spec(), ActivationFormat::mxfp8, true);
  const mxmoe::Selection refused = mxmoe::judge(d, mxmoe::Preferences{});
  if (refused.chosen.empty()) {
    bool suggests_the_judge = false;
    for (const mxmoe::Suggestion& g : refused.suggestions)
      suggests_the_judge =
          suggests_the_judge || (g.change == "allow_reference=true" && g.backend == "reference");
    EXPECT_TRUE(suggests_the_judge);
  } else {
    EXPECT_FALSE(mxmoe::find_backend(refused.chosen)->is_reference()) << refused.chosen;
  }
  d.request.allow_reference = true;
  const mxmoe::Selection s = mxmoe::judge(d, mxmoe::Preferences{});
  ASSERT_FALSE(s.chosen.empty());
  EXPECT_TRUE(covered(s.chosen, ActivationFormat::mxfp8)) << s.chosen;
  int refused_for_invariance = 0;
  for (const mxmoe::Verdict& v : s.candidates)
    for (const mxmoe::Rejection& r : v.reasons)
      if (r.code == ReasonCode::batch_invariance) {
        ++refused_for_invariance;
        EXPECT_FALSE(r.remedy.empty()) << v.name;
      }
  // avx512_bf16 implements mxfp8 without claiming it; other machines may lack it entirely.
  const mxmoe::Backend* bf16 = mxmoe::find_backend("avx512_bf16");
  if (bf16 != nullptr &&
      bf16->check(deployment(small_spec(), ActivationFormat::mxfp8, false)).empty()) {
    EXPECT_GE(refused_for_invariance, 1);
  }
}

// Per-tensor (batch-dependent) activation scales can never be invariant; every format mxmoe
// has today scales per token or per 32-element block.
TEST(Claims, AllActivationFormatsScalePerToken) {
  for (ActivationFormat f : all_activation_formats())
    EXPECT_TRUE(mxmoe::activation_scale_is_per_token(f)) << mxmoe::to_string(f);
}

std::vector<float> run_backend(const mxmoe::LayerSpec& spec, const mxmoe::LayerStorage& storage,
                               std::string_view backend, ActivationFormat f,
                               const mxmoe::InvarianceInputs& in, int threads) {
  mxmoe::MoeLayer layer =
      mxmoe::testing::test_layer(storage.weights(), forced_selection(spec, backend, f));
  layer.set_runtime(mxmoe::testing::test_runtime(threads));
  std::vector<float> y(in.x.size());
  layer.forward({.tokens = in.tokens,
                 .x = in.x.data(),
                 .y = y.data(),
                 .expert_ids = in.ids.data(),
                 .expert_weights = in.route_weights.data()});
  return y;
}

// The numerics classes: the backends the oracle may choose for one batch-invariant request at
// different token counts (tokens_hint 1, 8, 512) must give identical bits, and so must every
// int8 backend (one class: exact int32 block dots, same float epilogue, on zmm, tiles or ymm).
TEST(NumericsClass, BackendsChosenAcrossBatchSizesGiveTheSameBits) {
  const mxmoe::LayerSpec spec = small_spec();
  const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 13);
  const auto in = mxmoe::random_invariance_inputs(spec, mxmoe::InvarianceRouting::routed, 257, 31);
  for (ActivationFormat f : all_activation_formats()) {
    SCOPED_TRACE(mxmoe::to_string(f));
    std::set<std::string> chosen;
    for (int hint : {1, 8, 512}) {
      const auto s = mxmoe::judge(deployment(spec, f, true, hint), mxmoe::Preferences{});
      if (!s.chosen.empty()) chosen.insert(s.chosen);
    }
    if (f == ActivationFormat::int8) {
      for (std::string_view name : {"amx_int8", "avx512_vnni", "avx_vnni_int8", "avx2_int8"})
        if (runnable_here(spec, name, f)) chosen.insert(std::string(name));
    }
    if (chosen.size() < 2) continue;
    const std::vector<float> first = run_backend(spec, storage, *chosen.begin(), f, in, 2);
    for (const std::string& name : chosen)
      for (int threads : {1, 2}) {
        const std::vector<float> y = run_backend(spec, storage, name, f, in, threads);
        EXPECT_EQ(std::memcmp(y.data(), first.data(), y.size() * sizeof(float)), 0)
            << name << " vs " << *chosen.begin() << ", " << threads << " threads";
      }
  }
}

// The checker itself can fail: a "fresh" layer that rounds differently (bf16 instead of f32)
// is caught in the second run and reported with its position and both values.
TEST(Checker, ReportsTheFirstMismatch) {
  const mxmoe::LayerSpec spec = small_spec();
  const mxmoe::LayerStorage storage = mxmoe::LayerStorage::random(spec, 14);
  const auto in = mxmoe::random_invariance_inputs(spec, mxmoe::InvarianceRouting::routed, 16, 32);
  int built = 0;
  const auto make = [&](mxmoe::Runtime& rt) {
    const ActivationFormat f = built++ == 0 ? ActivationFormat::f32 : ActivationFormat::bf16;
    return mxmoe::MoeLayer(storage.weights(), forced_selection(spec, "reference", f), rt);
  };
  mxmoe::InvarianceOptions options;
  options.batch_sizes = {1, 16};
  const auto report = mxmoe::check_batch_invariance(make, in, options);
  ASSERT_FALSE(report.identical());
  EXPECT_EQ(report.first_mismatch->run, 1);
  EXPECT_EQ(report.first_mismatch->threads, 1);
  EXPECT_EQ(report.first_mismatch->batch_size, 1);
  EXPECT_NE(report.first_mismatch->alone, report.first_mismatch->batched);
  EXPECT_NE(report.first_mismatch->describe().find("batch of 1"), std::string::npos);
}

}  // namespace
}  // namespace invariance_test
