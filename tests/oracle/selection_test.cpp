// judge()/select(): ranking, forcing, excluding, unknown names, suggestions, replay of
// captured hardware.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/registry.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/log.hpp"
#include "stub_backend.hpp"
#include "test_platform.hpp"

namespace mxmoe::testing {
namespace {

using ::testing::HasSubstr;

// Stand-ins for the real ladder, with the ISA the real ones need.
struct Ladder {
  StubBackend amx{"amx_int8", with_isa(portable_caps(), {"amx_tile", "amx_int8"}), 10.0};
  StubBackend vnni{"avx512_vnni", with_isa(portable_caps(), {"avx512f", "avx512bw", "avx512_vnni"}),
                   20.0};
  StubBackend avx2{"avx2", with_isa(portable_caps(), {"avx2", "fma", "f16c"}), 40.0};
  StubBackend ref{"reference", portable_caps(), 400.0};
  std::vector<const Backend*> all() const { return candidates(amx, vnni, avx2, ref); }
};

std::vector<bool> supported(const Selection& s) {
  std::vector<bool> out;
  for (const Verdict& v : s.candidates) out.push_back(v.supported);
  return out;
}

TEST(Selection, LowestEstimatedCostWinsAndSaysWhy) {
  const Ladder l;
  const Selection s = select(sample_deployment(), Preferences{}, l.all());
  EXPECT_EQ(s.chosen, "amx_int8");
  EXPECT_EQ(s.why, "lowest estimated cost: 10.0 us at 1 token (next: avx512_vnni 20.0 us)");
  EXPECT_EQ(supported(s), (std::vector<bool>{true, true, true, true}));
  EXPECT_DOUBLE_EQ(s.candidates[2].estimated_us, 40.0);
}

// Invariance is promised across batch sizes, so layers built for different tokens_hint
// values (a prefill and a decode deployment) must get one backend: an invariant request is
// ranked by the cost summed over 1, 8, 64 and 512 tokens, whatever its hint.
TEST(Selection, BatchInvariantChoiceDoesNotDependOnTheBatchSize) {
  const StubBackend decode("decode_fast", portable_caps(), 10.0, {}, 1.0);
  const StubBackend prefill("prefill_fast", portable_caps(), 50.0, {}, 0.1);
  Deployment d = sample_deployment();
  for (bool invariant : {false, true}) {
    d.request.batch_invariant = invariant;
    std::vector<std::string> chosen;
    for (int hint : {1, 8, 64, 512, 4096}) {
      d.request.tokens_hint = hint;
      chosen.push_back(select(d, Preferences{}, candidates(decode, prefill)).chosen);
    }
    if (invariant) {
      // decode_fast: 4 x 10 + 585 x 1.0 = 625 us; prefill_fast: 4 x 50 + 585 x 0.1 = 258.5 us.
      EXPECT_EQ(chosen, std::vector<std::string>(5, "prefill_fast"));
      const Selection s = select(d, Preferences{}, candidates(decode, prefill));
      EXPECT_DOUBLE_EQ(s.candidates[1].estimated_us, 258.5);
      EXPECT_THAT(s.why, HasSubstr("summed over 1, 8, 64 and 512 tokens"));
    } else {
      EXPECT_EQ(chosen, (std::vector<std::string>{"decode_fast", "decode_fast", "prefill_fast",
                                                  "prefill_fast", "prefill_fast"}));
    }
  }
}

TEST(Selection, TiesFollowThePreferenceOrderThenRegistryOrder) {
  const StubBackend a("a", portable_caps(), 5.0), b("b", portable_caps(), 5.0);
  Preferences prefs;
  prefs.source = "test family";
  prefs.order = {"not_built", "b", "a"};  // unknown names are ignored
  EXPECT_EQ(select(sample_deployment(), prefs, candidates(a, b)).chosen, "b");
  EXPECT_THAT(select(sample_deployment(), prefs, candidates(a, b)).why,
              HasSubstr("tied with a; first in the test family order"));
  const Selection unordered = select(sample_deployment(), Preferences{}, candidates(a, b));
  EXPECT_EQ(unordered.chosen, "a");
  EXPECT_THAT(unordered.why, HasSubstr("tied with b; first in the registered backends' order"));
}

TEST(Selection, ActivationResolvedFromPreferencesUnlessRequested) {
  BackendCapabilities int8_only = portable_caps();
  int8_only.activations = {ActivationFormat::int8};
  const StubBackend stub("int8_only", int8_only, 1.0);
  Deployment d = sample_deployment();
  d.request.activation.reset();
  Preferences prefs;
  prefs.default_activation = ActivationFormat::int8;
  const Selection s = select(d, prefs, candidates(stub));
  EXPECT_EQ(s.deployment.request.activation, ActivationFormat::int8);
  d.request.activation = ActivationFormat::f32;
  EXPECT_THROW((void)select(d, prefs, candidates(stub)), NoBackendError);
}

TEST(Selection, ForcedBackendWinsAndOthersKeepTheirOwnReasons) {
  const Ladder l;
  Deployment d = sample_deployment();
  d.hardware.isa.amx_int8 = false;
  d.request.forced_backend = "avx2";
  const Selection s = select(d, Preferences{}, l.all());
  EXPECT_EQ(s.chosen, "avx2");
  EXPECT_THAT(s.why, HasSubstr("forced by the request"));
  const Verdict& amx = s.candidates[0];
  ASSERT_EQ(amx.reasons.size(), 2u);  // its own unsupported_isa, then not_forced
  EXPECT_EQ(amx.reasons[0].code, ReasonCode::unsupported_isa);
  EXPECT_EQ(amx.reasons[1].code, ReasonCode::not_forced);
  EXPECT_EQ(s.candidates[1].reasons.at(0).code, ReasonCode::not_forced);
}

TEST(Selection, ForcingAnUnsupportedBackendFailsWithItsReasons) {
  const Ladder l;
  Deployment d = sample_deployment();
  d.hardware.isa.amx_int8 = false;
  d.request.forced_backend = "amx_int8";
  try {
    (void)select(d, Preferences{}, l.all());
    FAIL();
  } catch (const NoBackendError& e) {
    EXPECT_THAT(e.what(), HasSubstr("backend: amx_int8, reason: unsupported_isa: the backend "
                                    "needs the amx_int8 instructions"));
    EXPECT_THAT(e.what(), HasSubstr("not forcing backend amx_int8 would allow avx512_vnni"));
    EXPECT_EQ(e.selection().suggestions.at(0).backend, "avx512_vnni");
  }
}

TEST(Selection, ExcludedBackendsAreJudgedAndReported) {
  const Ladder l;
  Deployment d = sample_deployment();
  d.request.excluded_backends = {"amx_int8", "avx512_vnni"};
  const Selection s = select(d, Preferences{}, l.all());
  EXPECT_EQ(s.chosen, "avx2");
  ASSERT_EQ(s.candidates.size(), 4u);  // excluded ones are still in the report
  EXPECT_EQ(s.candidates[0].reasons.at(0).code, ReasonCode::user_excluded);
  EXPECT_THAT(format_selection_table(s), HasSubstr("excluded"));
}

TEST(Selection, UnknownBackendNamesListTheValidOnes) {
  const Ladder l;
  Deployment d = sample_deployment();
  d.request.forced_backend = "cuda_marlin";
  try {
    (void)judge(d, Preferences{}, l.all());
    FAIL();
  } catch (const std::invalid_argument& e) {
    // The one form every reader of a backend name uses (unknown_backend_message).
    EXPECT_EQ(std::string(e.what()),
              "forced by --backend / MXMOE_BACKEND: unknown backend 'cuda_marlin'; valid "
              "backends: amx_int8, avx512_vnni, avx2, reference");
  }
  d.request.forced_backend.clear();
  d.request.excluded_backends = {"avx3"};
  EXPECT_THROW((void)judge(d, Preferences{}, l.all()), std::invalid_argument);
  EXPECT_EQ(unknown_backend_message("x", "a\nb", {}),
            "x: unknown backend 'a\\x0ab'; valid backends: none registered");
}

TEST(Selection, SuggestionsListEverySingleChangeThatHelps) {
  BackendCapabilities amx_caps = with_isa(portable_caps(), {"amx_int8"});
  amx_caps.activations = {ActivationFormat::int8};
  amx_caps.batch_invariant_activations = {};
  BackendCapabilities bf16_invariant = portable_caps();
  bf16_invariant.batch_invariant_activations = {ActivationFormat::bf16};
  const StubBackend amx("amx_int8", amx_caps, 1.0);
  const StubBackend portable("portable", bf16_invariant, 9.0);
  Deployment d = sample_deployment();
  d.request.batch_invariant = true;
  d.request.excluded_backends = {"portable"};
  const Selection s = judge(d, Preferences{}, candidates(amx, portable));
  ASSERT_EQ(s.chosen, "");
  std::vector<std::string> texts;
  for (const Suggestion& g : s.suggestions) texts.push_back(g.text);
  // batch_invariant=false alone: amx still lacks bf16, portable is still excluded -> none.
  // activation=int8 alone: neither proves int8 invariant -> none. Only the exclusion helps.
  EXPECT_EQ(texts, (std::vector<std::string>{"not excluding portable would allow portable"}));

  d.request.excluded_backends.clear();
  d.request.activation = ActivationFormat::int8;
  d.request.forced_backend = "amx_int8";
  // Only amx_int8 may run (forced), and it only lacks batch invariance.
  const Selection t = judge(d, Preferences{}, candidates(amx, portable));
  std::vector<std::string> changes;
  for (const Suggestion& g : t.suggestions) changes.push_back(g.text);
  EXPECT_EQ(changes, (std::vector<std::string>{"batch_invariant=false would allow amx_int8"}));
}

// A judge (reference) is the only backend for a request, and hundreds of times slower: the
// oracle never chooses it silently. Nothing fits (NoBackendError at select), with every reason
// and a suggestion naming it; forced by name or allowed, it is chosen.
TEST(Selection, JudgeOnlyBackendIsNeverChosenSilently) {
  BackendCapabilities fast_caps = portable_caps();
  fast_caps.batch_invariant_activations = {ActivationFormat::bf16};
  StubBackend fast("fast", fast_caps, 1.0);
  StubBackend judge_stub("reference", portable_caps(), 1000.0);
  judge_stub.as_reference();
  Deployment d = sample_deployment();
  d.request.activation = ActivationFormat::mxfp8;
  d.request.batch_invariant = true;

  try {
    (void)select(d, Preferences{}, candidates(fast, judge_stub));
    FAIL() << "the judge was chosen without being asked for";
  } catch (const NoBackendError& e) {
    const Selection& s = e.selection();
    EXPECT_EQ(s.candidates[1].reasons.front().code, ReasonCode::reference_only);
    EXPECT_THAT(s.candidates[1].reasons.front().remedy, HasSubstr("--allow-reference"));
    ASSERT_FALSE(s.suggestions.empty());
    EXPECT_EQ(s.suggestions.back().change, "allow_reference=true");
    EXPECT_EQ(s.suggestions.back().backend, "reference");
    EXPECT_THAT(std::string(e.what()), HasSubstr("allow_reference=true"));
  }
  Deployment allowed = d;
  allowed.request.allow_reference = true;
  EXPECT_EQ(select(allowed, Preferences{}, candidates(fast, judge_stub)).chosen, "reference");
  Deployment forced = d;
  forced.request.forced_backend = "reference";
  EXPECT_EQ(select(forced, Preferences{}, candidates(fast, judge_stub)).chosen, "reference");
  // When a fast backend fits, it wins even when the judge is allowed (cost ranks them).
  allowed.request.batch_invariant = false;
  EXPECT_EQ(select(allowed, Preferences{}, candidates(fast, judge_stub)).chosen, "fast");
}

// The dispatch log goes through the library's log sink (MXMOE_VERBOSE=dispatch sets its
// category): one line per candidate on each judge(), and nothing when the category is off.
TEST(Selection, DispatchLogGoesThroughTheLogSink) {
  struct Captured {
    std::string text;
    int calls = 0;
  } captured;
  const auto capture = [](LogCategory category, const char* message, void* user) {
    auto* c = static_cast<Captured*>(user);
    if (category == LogCategory::dispatch) c->text += message;
    ++c->calls;
  };
  const Ladder l;
  const LogSink previous =
      set_log_sink({capture, &captured, static_cast<unsigned>(LogCategory::dispatch)});
  (void)judge(sample_deployment(), Preferences{}, l.all());
  set_log_sink({capture, &captured, 0});
  (void)judge(sample_deployment(), Preferences{}, l.all());
  set_log_sink(previous);
  EXPECT_EQ(captured.calls, 1);
  EXPECT_THAT(captured.text, HasSubstr("mxmoe dispatch: amx_int8: selected"));
  EXPECT_THAT(captured.text, HasSubstr("mxmoe dispatch: reference: supported"));
  EXPECT_EQ(std::count(captured.text.begin(), captured.text.end(), '\n'), 4);
}

// A probe captured on a machine without AVX-512, and one where the OS refused AMX, replayed
// here: the verdicts are those a machine of that kind gives, whatever this machine has.
TEST(Selection, ReplayedHardwareGivesThatMachinesVerdicts) {
  const Ladder l;
  const std::string haswell = R"({
    "vendor": "GenuineIntel", "model": "Intel(R) Xeon(R) CPU E5-2699 v3", "logical_cpus": 36,
    "l1d_bytes": 32768, "l2_bytes": 262144, "l3_bytes": 47185920,
    "isa": {"avx2": true, "fma": true, "f16c": true, "avx512f": false, "avx512bw": false,
            "avx512vl": false, "avx512dq": false, "avx512_vnni": false, "avx_vnni": false,
            "avx512_bf16": false, "avx512_fp16": false, "amx_tile": false, "amx_int8": false,
            "amx_bf16": false},
    "os_denied": [], "isa_cap": "", "cuda_devices": [], "source": "probe"})";
  Deployment d = sample_deployment();
  d.hardware = hardware_from_json(haswell);
  Selection s = select(d, Preferences{}, l.all());
  EXPECT_EQ(s.chosen, "avx2");
  EXPECT_EQ(supported(s), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(s.candidates[1].reasons.size(), 3u);  // avx512f, avx512bw, avx512_vnni
  for (const Rejection& r : s.candidates[1].reasons) EXPECT_EQ(r.code, ReasonCode::unsupported_isa);

  // Sapphire Rapids in a container whose seccomp filter refuses arch_prctl: AMX denied.
  Hardware spr = sample_deployment().hardware;
  spr.isa.amx_tile = spr.isa.amx_int8 = spr.isa.amx_bf16 = false;
  spr.os_denied = {"amx_tile", "amx_int8", "amx_bf16"};
  d.hardware = hardware_from_json(to_json(spr));
  s = select(d, Preferences{}, l.all());
  EXPECT_EQ(s.chosen, "avx512_vnni");
  ASSERT_EQ(s.candidates[0].reasons.size(), 2u);
  EXPECT_EQ(s.candidates[0].reasons[0].code, ReasonCode::os_denied);
  EXPECT_EQ(s.candidates[0].reasons[0].required, "amx_tile");

  // The same verdicts as an ISA cap applied at probe time on a full machine.
  Deployment capped = sample_deployment();
  capped.hardware.isa = cap_isa(capped.hardware.isa, "avx2");
  EXPECT_EQ(supported(select(capped, Preferences{}, l.all())),
            (std::vector<bool>{false, false, true, true}));
}

TEST(Selection, DispatchPreferencesExistForEveryFamily) {
  for (Family f : {Family::gpt_oss, Family::mixtral, Family::qwen3_moe, Family::deepseek_v3,
                   Family::deepseek_v4}) {
    const Preferences p = preferences_for(f);
    EXPECT_THAT(p.source, HasSubstr(to_string(f)));
    // No family has an order of its own yet: ties follow the registry (backends.inc).
    EXPECT_TRUE(p.order.empty());
  }
}

}  // namespace
}  // namespace mxmoe::testing

namespace mxmoe::testing {
namespace {

// Issue 14: DeepSeek-V4-Flash (its routed and its hash-routed layers) with batch invariance
// and MXFP8 activations selects a fast backend wherever one of the bf16 kernels runs:
// amx_bf16 on a probe with AMX, avx512_bf16 with AVX-512 BF16. With AVX2 only, no backend
// fits (reference is the judge, never chosen silently). The real registry, probes of this
// machine with their features set by hand, so the test means the same on every CPU.
TEST(Selection, DeepSeekV4FlashMxfp8BatchInvariantPicksAFastBackend) {
  MXMOE_REQUIRE_X86_BACKENDS();  // probes replayed here name x86 kernels
  Hardware all = probe_hardware();
  for (std::string_view f : isa_feature_names()) set_isa_feature(all.isa, f, true);
  Request request;
  request.activation = ActivationFormat::mxfp8;
  request.batch_invariant = true;
  for (const char* name : {"deepseek-v4-flash", "deepseek-v4-flash-hash"}) {
    SCOPED_TRACE(name);
    const LayerSpec spec = preset(name);
    const std::pair<const char*, const char*> cases[] = {{"amx", "amx_bf16"},
                                                         {"avx512", "avx512_bf16"}};
    for (const auto& [cap, want] : cases) {
      Hardware hw = all;
      hw.isa = cap_isa(all.isa, cap);
      const Selection s = select(Deployment{spec, hw, request}, preferences_for(spec.family));
      EXPECT_EQ(s.chosen, want) << cap;
    }
    Hardware avx2 = all;
    avx2.isa = cap_isa(all.isa, "avx2");
    EXPECT_THROW((void)select(Deployment{spec, avx2, request}, preferences_for(spec.family)),
                 NoBackendError);
  }
}

// A renamed backend answers to its former name wherever a request names it
// (Backend::former_names), and the selection speaks of it by its name now: a request naming
// the old name is judged exactly as one naming the new.
TEST(FormerNames, ARequestNamingAFormerNameIsJudgedAsTheNameNow) {
  EXPECT_EQ(find_backend("avx2")->name(), "avx2_fp32");
  EXPECT_EQ(find_backend("avx512_vnni")->name(), "avx512_vnni_int8");
  int renamed = 0;
  for (const Backend* b : registered_backends()) {
    for (std::string_view former : b->former_names()) {
      SCOPED_TRACE(former);
      ++renamed;
      EXPECT_EQ(find_backend(former), b);
      for (const Backend* other : registered_backends()) {  // one backend per name
        if (other == b) continue;
        EXPECT_NE(other->name(), former);
        for (std::string_view f : other->former_names()) EXPECT_NE(f, former);
      }
      Deployment by_former = sample_deployment();
      by_former.request.forced_backend = std::string(former);
      Deployment by_name = by_former;
      by_name.request.forced_backend = std::string(b->name());
      const Selection old_name = judge(by_former, Preferences{}, registered_backends());
      const Selection new_name = judge(by_name, Preferences{}, registered_backends());
      EXPECT_EQ(explain_json(old_name), explain_json(new_name));
      EXPECT_EQ(old_name.deployment.request.forced_backend, b->name());

      by_former.request.forced_backend.clear();
      by_former.request.excluded_backends = {std::string(former)};
      by_name.request.forced_backend.clear();
      by_name.request.excluded_backends = {std::string(b->name())};
      EXPECT_EQ(explain_json(judge(by_former, Preferences{}, registered_backends())),
                explain_json(judge(by_name, Preferences{}, registered_backends())));
      // Both names excluded are one exclusion (one reason, one suggestion).
      by_former.request.excluded_backends = {std::string(former), std::string(b->name())};
      EXPECT_EQ(judge(by_former, Preferences{}, registered_backends())
                    .deployment.request.excluded_backends,
                std::vector<std::string>{std::string(b->name())});
    }
  }
  EXPECT_EQ(renamed, 2);
}

}  // namespace
}  // namespace mxmoe::testing
