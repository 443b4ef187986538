// Every reason code in the closed catalogue is produced by some deployment (table-driven),
// so none is dead and docs/REASON_CODES.md describes only reachable codes.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "stub_backend.hpp"

namespace mxmoe::testing {
namespace {

struct Case {
  ReasonCode code;
  BackendCapabilities caps;
  std::vector<Rejection> fixed;             // a stub's own refusals
  std::function<void(Deployment&)> change;  // applied to sample_deployment()
  bool is_reference = false;                // the stub is a reference (reference-like)
};

std::vector<Case> cases() {
  const BackendCapabilities all = portable_caps();
  BackendCapabilities int8_only = all;
  int8_only.activations = {ActivationFormat::int8};
  BackendCapabilities no_clamp = all;
  no_clamp.activation_fns = {ActivationFn::swiglu_oai};
  BackendCapabilities gpt_routing = all;
  gpt_routing.routing_methods = {RoutingMethod::topk_softmax};
  BackendCapabilities not_invariant = all;
  not_invariant.batch_invariant_activations = {};
  BackendCapabilities uncompiled = all;
  uncompiled.uncompiled_kernels = {"amx_int8"};
  BackendCapabilities cuda = all;
  cuda.needs_cuda = true;
  BackendCapabilities no_weights = all;
  no_weights.weight_formats = {};
  BackendCapabilities wide = all;
  wide.dim_multiple = 256;
  const auto none = [](Deployment&) {};
  return {
      {ReasonCode::unsupported_isa,
       with_isa(all, {"avx512_vnni"}),
       {},
       [](Deployment& d) { d.hardware.isa.avx512_vnni = false; }},
      {ReasonCode::os_denied,
       with_isa(all, {"amx_tile"}),
       {},
       [](Deployment& d) {
         d.hardware.isa.amx_tile = false;
         d.hardware.os_denied = {"amx_tile"};
       }},
      // A backend whose kernel folders this build left out (every x86 family on a non-x86
      // target): check_capabilities reports it from the table.
      {ReasonCode::not_compiled, uncompiled, {}, none},
      {ReasonCode::weight_format, no_weights, {}, none},
      {ReasonCode::activation_format, int8_only, {}, none},
      {ReasonCode::activation_fn,
       no_clamp,
       {},
       [](Deployment& d) { d.layer.activation = ActivationFn::silu_glu_clamp; }},
      {ReasonCode::routing,
       gpt_routing,
       {},
       [](Deployment& d) { d.layer.routing = RoutingMethod::sigmoid_group_topk; }},
      {ReasonCode::shape_alignment, wide, {}, none},
      {ReasonCode::batch_invariance,
       not_invariant,
       {},
       [](Deployment& d) { d.request.batch_invariant = true; }},
      {ReasonCode::expert_parallel, all, {}, [](Deployment& d) { d.request.ep_rank = 5; }},
      {ReasonCode::no_device, cuda, {}, none},
      {ReasonCode::user_excluded,
       all,
       {},
       [](Deployment& d) { d.request.excluded_backends = {"under_test"}; }},
      {ReasonCode::not_forced, all, {}, [](Deployment& d) { d.request.forced_backend = "other"; }},
      // A judge is never chosen unless forced or allowed.
      {ReasonCode::reference_only, all, {}, none, /*is_reference=*/true},
  };
}

TEST(ReasonCodes, EveryCodeIsProducedBySomeDeployment) {
  const StubBackend other("other", portable_caps(), 100.0);
  std::set<ReasonCode> produced;
  for (const Case& c : cases()) {
    SCOPED_TRACE(std::string(to_string(c.code)));
    StubBackend under_test("under_test", c.caps, 1.0, c.fixed);
    if (c.is_reference) under_test.as_reference();
    Deployment d = sample_deployment();
    c.change(d);
    const Selection s = judge(d, Preferences{}, candidates(under_test, other));
    const Verdict& v = s.candidates.at(0);
    ASSERT_EQ(v.name, "under_test");
    EXPECT_FALSE(v.supported);
    // The case yields only its code (shape_alignment: one record per dimension): the table
    // checks one predicate at a time.
    ASSERT_FALSE(v.reasons.empty());
    for (const Rejection& r : v.reasons) {
      EXPECT_EQ(r.code, c.code);
      EXPECT_FALSE(r.detail.empty());
      produced.insert(r.code);
    }
  }
  const std::vector<ReasonCode> all = all_reason_codes();
  EXPECT_EQ(produced, std::set<ReasonCode>(all.begin(), all.end()));
}

TEST(ReasonCodes, NamesRoundTripAndUnknownNamesListTheValidOnes) {
  std::set<std::string_view> names;
  for (ReasonCode c : all_reason_codes()) {
    EXPECT_EQ(parse_reason_code(to_string(c)), c);
    names.insert(to_string(c));
  }
  EXPECT_EQ(names.size(), all_reason_codes().size());
  try {
    (void)parse_reason_code("slow");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported_isa, os_denied"), std::string::npos);
  }
}

}  // namespace
}  // namespace mxmoe::testing
