// The failure report: the exception's message and the structured Selection both carry
// every candidate and every reason (the test the engine in issue 3 was missing).
#include "oracle/report.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "stub_backend.hpp"

namespace mxmoe::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr std::string_view kHeadline =
    "No MXFP4 MoE backend supports the deployment configuration.";

Rejection known_refusal() {
  return {ReasonCode::routing, "stub cannot route with sqrt(softplus) scores", "topk_softmax",
          "sqrtsoftplus_topk", ""};
}

TEST(NoBackendReport, StubReasonReachesMessageAndStructuredReport) {
  const StubBackend refuses("stub_refuses", portable_caps(), 1.0, {known_refusal()});
  const StubBackend needs_amx("stub_amx", with_isa(portable_caps(), {"amx_int8"}), 1.0);
  Deployment d = sample_deployment();
  d.hardware.isa.amx_int8 = false;
  const auto all = candidates(refuses, needs_amx);
  try {
    (void)select(d, Preferences{}, all);
    FAIL() << "select() must throw when no candidate fits";
  } catch (const NoBackendError& e) {
    const std::string what = e.what();
    EXPECT_THAT(what, StartsWith(kHeadline));
    EXPECT_THAT(what, HasSubstr("weight_key=mxfp4, activation_key=bf16, batch_invariant=false"));
    EXPECT_THAT(what, HasSubstr("Candidate backends were: [stub_refuses, stub_amx]."));
    EXPECT_THAT(what, HasSubstr("backend: stub_refuses, reason: routing: stub cannot route with "
                                "sqrt(softplus) scores (required topk_softmax, got "
                                "sqrtsoftplus_topk)"));
    EXPECT_THAT(what, HasSubstr("backend: stub_amx, reason: unsupported_isa"));

    const Selection& s = e.selection();
    EXPECT_EQ(s.chosen, "");
    ASSERT_EQ(s.candidates.size(), 2u);
    EXPECT_EQ(s.candidates[0].name, "stub_refuses");
    EXPECT_FALSE(s.candidates[0].supported);
    ASSERT_EQ(s.candidates[0].reasons.size(), 1u);
    EXPECT_EQ(s.candidates[0].reasons[0], known_refusal());
    EXPECT_EQ(s.candidates[1].reasons.at(0).code, ReasonCode::unsupported_isa);
    EXPECT_EQ(s.candidates[1].reasons.at(0).required, "amx_int8");
    // The same report, as JSON, still holds the reason.
    EXPECT_THAT(to_json(s), HasSubstr("stub cannot route with sqrt(softplus) scores"));
    // The table shows it too.
    EXPECT_THAT(format_selection_table(s), HasSubstr("stub cannot route"));
  }
}

// The real failure behind issue 3: DeepSeek-V4-Flash, batch invariance requested, on a
// GB200 (an Arm CPU: no x86 feature at all). Whatever the family, the error is never bare.
TEST(NoBackendReport, EveryFamilyPreferenceKeepsEveryReason) {
  const StubBackend amx("amx_int8", with_isa(portable_caps(), {"amx_tile", "amx_int8"}), 1.0);
  BackendCapabilities variant = portable_caps();
  variant.batch_invariant_activations = {};
  const StubBackend portable("portable_variant", variant, 5.0);

  for (Family family : {Family::gpt_oss, Family::mixtral, Family::qwen3_moe, Family::deepseek_v3,
                        Family::deepseek_v4}) {
    SCOPED_TRACE(std::string(to_string(family)));
    Deployment d = sample_deployment();
    d.layer.family = family;
    d.layer.name = "deepseek-v4-flash";
    d.hardware.model = "NVIDIA Grace";
    d.hardware.vendor = "ARM";
    d.hardware.isa = IsaFeatures{};
    d.hardware.cuda_devices = {{"NVIDIA GB200", 100, 192ull << 30}};
    d.request.activation.reset();  // the family's preference decides
    d.request.batch_invariant = true;
    const Preferences prefs = preferences_for(family);
    const Selection s = judge(d, prefs, candidates(amx, portable));
    ASSERT_EQ(s.chosen, "");
    EXPECT_EQ(s.deployment.request.activation, prefs.default_activation);
    const std::string message = format_no_backend_message(s);
    EXPECT_THAT(message, StartsWith(kHeadline));
    EXPECT_THAT(message, HasSubstr("Candidate backends were: [amx_int8, portable_variant]"));
    EXPECT_THAT(message, HasSubstr("backend: amx_int8, reason: unsupported_isa"));
    EXPECT_THAT(message, HasSubstr("backend: portable_variant, reason: batch_invariance"));
    EXPECT_THAT(message, HasSubstr(prefs.source));
    // The smallest change that would help is named.
    EXPECT_THAT(message, HasSubstr("batch_invariant=false would allow portable_variant"));
    ASSERT_FALSE(s.suggestions.empty());
    EXPECT_EQ(s.suggestions.front().change, "batch_invariant=false");
    EXPECT_EQ(s.suggestions.front().backend, "portable_variant");
  }
}

TEST(NoBackendReport, AllFailingPredicatesOfOneBackendAreReported) {
  BackendCapabilities caps;
  caps.isa = {"avx512_vnni", "amx_int8"};
  caps.activations = {ActivationFormat::int8};
  caps.batch_invariant_activations = {};
  caps.activation_fns = {ActivationFn::silu_glu};
  caps.routing_methods = {RoutingMethod::softmax_topk};
  caps.dim_multiple = 128;
  caps.needs_cuda = true;
  const StubBackend strict("strict", caps, 1.0);

  Deployment d = sample_deployment();  // H = I = 2880: not multiples of 128
  d.hardware.isa.avx512_vnni = false;
  d.hardware.isa.amx_int8 = false;
  d.hardware.os_denied = {"amx_int8"};
  d.request.activation = ActivationFormat::mxfp8;
  d.request.batch_invariant = true;
  d.request.ep_size = 3;
  d.request.placement = {0, 1, 2};  // a table of 3 experts for a layer of 32
  const std::vector<Rejection> reasons = strict.check(d);

  std::vector<ReasonCode> codes;
  for (const Rejection& r : reasons) {
    codes.push_back(r.code);
    EXPECT_FALSE(r.detail.empty()) << to_string(r.code);
    EXPECT_FALSE(r.required.empty()) << to_string(r.code);
    EXPECT_FALSE(r.actual.empty()) << to_string(r.code);
  }
  EXPECT_EQ(codes,
            (std::vector<ReasonCode>{ReasonCode::unsupported_isa, ReasonCode::os_denied,
                                     ReasonCode::activation_format, ReasonCode::activation_fn,
                                     ReasonCode::routing, ReasonCode::shape_alignment,
                                     ReasonCode::shape_alignment, ReasonCode::batch_invariance,
                                     ReasonCode::expert_parallel, ReasonCode::no_device}));
  EXPECT_EQ(reasons[0].required, "avx512_vnni");
  EXPECT_EQ(reasons[1].required, "amx_int8");
  EXPECT_EQ(reasons[5].actual, "hidden=2880");
  EXPECT_EQ(reasons[6].actual, "intermediate=2880");

  // All of them reach the exception's message.
  try {
    (void)select(d, Preferences{}, candidates(strict));
    FAIL();
  } catch (const NoBackendError& e) {
    for (const Rejection& r : reasons) EXPECT_THAT(e.what(), HasSubstr(describe_rejection(r)));
  }
}

TEST(NoBackendReport, BatchInvarianceRemedyNamesProvenFormats) {
  BackendCapabilities caps = portable_caps();
  caps.batch_invariant_activations = {ActivationFormat::f32, ActivationFormat::int8};
  Deployment d = sample_deployment();
  d.request.batch_invariant = true;
  const std::vector<Rejection> r = check_capabilities(caps, d);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].code, ReasonCode::batch_invariance);
  EXPECT_EQ(r[0].remedy, "batch_invariant=false, or activation=f32, or activation=int8");
}

TEST(NoBackendReport, ExpertParallelRankAndSize) {
  const BackendCapabilities caps = portable_caps();
  Deployment d = sample_deployment();
  d.request.ep_size = 4;
  d.request.ep_rank = 4;
  auto r = check_capabilities(caps, d);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].code, ReasonCode::expert_parallel);
  EXPECT_EQ(r[0].actual, "ep_rank=4");
  d.request.ep_size = 0;
  r = check_capabilities(caps, d);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].actual, "ep_size=0");
  d.request.ep_size = 8;
  d.request.ep_rank = 7;
  EXPECT_TRUE(check_capabilities(caps, d).empty());
}

TEST(NoBackendReport, EmptyCandidateListIsStillExplained) {
  const Selection s = judge(sample_deployment(), Preferences{}, {});
  EXPECT_EQ(s.chosen, "");
  EXPECT_THAT(format_no_backend_message(s), HasSubstr("Candidate backends were: []"));
  EXPECT_THAT(format_no_backend_message(s), HasSubstr("no backend is registered"));
}

// `mxmoe info`'s table names the SVE vector length where there is one: the SVE kernels'
// rows per instruction follow it, and a report from an Arm machine must say which it ran.
TEST(HardwareReport, SaysTheSveVectorLength) {
  Hardware arm;
  arm.arch = "aarch64";
  arm.isa.asimd = arm.isa.sve = true;
  arm.sve_vector_bits = 256;
  const std::string text = format_hardware_report(arm);
  EXPECT_THAT(text, HasSubstr("ISA usable: asimd sve\n"));
  EXPECT_THAT(text, HasSubstr("SVE:        256-bit vectors\n"));
  arm.isa.sve = false;
  arm.sve_vector_bits = 0;
  EXPECT_THAT(format_hardware_report(arm), ::testing::Not(HasSubstr("SVE:")));
}

}  // namespace
}  // namespace mxmoe::testing
