// JSON round trips of the plain-data types, and their strictness: a saved deployment is
// replayed only if every key is known and none is missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "stub_backend.hpp"

namespace mxmoe::testing {
namespace {

using ::testing::HasSubstr;

// A deployment with every field away from its default, drawn at random (seeded).
Deployment random_deployment(std::mt19937& rng) {
  auto pick = [&rng](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  auto real = [&rng](float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(rng);
  };
  Deployment d = sample_deployment();
  d.layer.name = "random-" + std::to_string(pick(1000));
  d.layer.family = static_cast<Family>(pick(5));
  d.layer.num_experts = 8 * (1 + pick(32));
  d.layer.top_k = 1 + pick(8);
  d.layer.hidden = 32 * (1 + pick(200));
  d.layer.intermediate = 32 * (1 + pick(200));
  d.layer.routing = static_cast<RoutingMethod>(pick(4));
  d.layer.routing_params = {pick(2) == 1, pick(2) == 1, 1 + pick(8), 1 + pick(4), real(0.5f, 3.f)};
  d.layer.activation = static_cast<ActivationFn>(pick(3));
  d.layer.activation_params = {real(1.f, 2.f), real(5.f, 10.f)};
  d.layer.expert_bias = pick(2) == 1;
  d.layer.router_bias = pick(2) == 1;
  d.layer.gate_up_layout = static_cast<GateUpLayout>(pick(2));
  d.layer.shared_experts = pick(3);
  d.layer.shared_intermediate = 32 * pick(100);
  // A probe of either architecture, with only that architecture's features.
  const bool arm = pick(2) == 1;
  d.hardware.arch = std::string(arm ? kArchAarch64 : kArchX86_64);
  d.hardware.isa = IsaFeatures{};
  d.hardware.sve_vector_bits = 0;
  for (std::string_view n : isa_feature_names(d.hardware.arch))
    set_isa_feature(d.hardware.isa, n, pick(2) == 1);
  if (arm) {  // the extensions come with their base, as the probe reports them
    d.hardware.isa.asimd = true;
    d.hardware.isa.sve2 = d.hardware.isa.sve2 && d.hardware.isa.sve;
  }
  if (d.hardware.isa.sve) d.hardware.sve_vector_bits = 128 * (1 + pick(16));
  d.hardware.os_denied = {arm ? "sve2" : "amx_tile"};
  d.hardware.isa_cap = arm ? "i8mm" : "avx512";
  d.hardware.l1d_bytes = 49152;
  d.hardware.l2_bytes = 2ull << 20;
  d.hardware.l3_bytes = 105ull << 20;
  d.hardware.cuda_devices = {{"NVIDIA GB200", 100, 192ull << 30}};
  d.hardware.source = "captured.json";
  d.request.activation = static_cast<ActivationFormat>(pick(4));
  d.request.batch_invariant = pick(2) == 1;
  d.request.ep_size = 1 + pick(4);
  d.request.ep_rank = pick(d.request.ep_size);
  d.request.threads = pick(64);
  d.request.tokens_hint = 1 + pick(4096);
  d.request.forced_backend = pick(2) == 1 ? "avx2" : "";
  d.request.excluded_backends = {"amx_int8", "reference"};
  return d;
}

TEST(Json, HardwareRoundTripsIncludingThisMachinesProbe) {
  const Hardware probed = probe_hardware();
  EXPECT_EQ(hardware_from_json(to_json(probed)), probed);
  std::mt19937 rng(7);
  int arches[2] = {0, 0};
  for (int i = 0; i < 16; ++i) {
    const Hardware random = random_deployment(rng).hardware;
    EXPECT_EQ(hardware_from_json(to_json(random)), random);
    // ISA features are named booleans, of the probe's architecture.
    const bool arm = random.arch == kArchAarch64;
    EXPECT_THAT(to_json(random), HasSubstr(arm ? "\"asimddp\": " : "\"avx512_vnni\": "));
    ++arches[arm];
  }
  EXPECT_GT(arches[0], 0);
  EXPECT_GT(arches[1], 0);
}

// A random deployment whose layer validates (the JSON form refuses an invalid layer).
Deployment random_valid_deployment(std::mt19937& rng) {
  while (true) {
    Deployment d = random_deployment(rng);
    try {
      validate(d.layer);
      return d;
    } catch (const std::invalid_argument&) {
    }
  }
}

TEST(Json, DeploymentRoundTrips) {
  std::mt19937 rng(11);
  for (int i = 0; i < 50; ++i) {
    Deployment d = random_valid_deployment(rng);
    d.request.allow_reference = i % 2 == 1;
    ASSERT_EQ(deployment_from_json(to_json(d)), d) << to_json(d);
    EXPECT_EQ(request_from_json(to_json(d.request)), d.request);
    EXPECT_EQ(layer_spec_from_json(to_json(d.layer)), d.layer);
  }
  Deployment unset = sample_deployment();
  unset.request.activation.reset();
  EXPECT_EQ(deployment_from_json(to_json(unset)), unset);
}

// Replayed files are untrusted: numbers are range-checked (never wrapped into an int), a
// layer that validate() refuses is refused, a Request written before allow_reference existed
// still reads (as false), and one written under its former key allow_judge_only reads as it.
TEST(Json, ReplayedDocumentsAreBounded) {
  const nlohmann::json good = nlohmann::json::parse(to_json(sample_deployment()));
  // The error of reading GOOD with one value replaced ("" when it is accepted).
  const auto error_with = [&](const char* section, const char* key, const nlohmann::json& value,
                              const char* inner = nullptr) {
    nlohmann::json j = good;
    if (inner != nullptr)
      j[section][inner][key] = value;
    else
      j[section][key] = value;
    try {
      (void)deployment_from_json(j.dump());
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(error_with("request", "threads", 100000),
              HasSubstr("\"threads\": expected an integer in [0, 1024], got 100000"));
  EXPECT_THAT(error_with("request", "tokens_hint", 1e12), HasSubstr("tokens_hint"));
  EXPECT_THAT(error_with("hardware", "logical_cpus", 1000000),
              HasSubstr("\"logical_cpus\": expected an integer in [1, 1024], got 1000000"));
  EXPECT_THAT(error_with("hardware", "logical_cpus", 1e12), HasSubstr("logical_cpus"));
  EXPECT_THAT(error_with("hardware", "logical_cpus", -5), HasSubstr("logical_cpus"));
  EXPECT_THAT(error_with("layer", "num_experts", 3000000000LL), HasSubstr("num_experts"));
  EXPECT_THAT(error_with("layer", "alpha", 1e300, "activation_params"),
              HasSubstr("outside the range of a float"));
  EXPECT_THAT(error_with("layer", "top_k", 33), HasSubstr("top_k = 33"));
  EXPECT_EQ(error_with("request", "threads", 1024), "");
  // A device's memory is an integer too: a float past 2^64 (found by the hardware fuzz
  // target, where nlohmann's cast was undefined behaviour) and a negative one are refused.
  for (const nlohmann::json& bytes : {nlohmann::json(8.5899e49), nlohmann::json(-1)}) {
    nlohmann::json j = good;
    j["hardware"]["cuda_devices"] = {{{"name", "H100"}, {"sm", 90}, {"memory_bytes", bytes}}};
    try {
      (void)deployment_from_json(j.dump());
      ADD_FAILURE() << "accepted memory_bytes " << bytes.dump();
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr("\"memory_bytes\": expected an integer in [0, "));
    }
  }

  // A Request written before allow_reference existed still reads (as false).
  nlohmann::json old = nlohmann::json::parse(to_json(sample_deployment().request));
  old.erase("allow_reference");
  EXPECT_EQ(request_from_json(old.dump()), sample_deployment().request);
  // ... and one written before placement existed (contiguous ranges).
  old.erase("placement");
  EXPECT_EQ(request_from_json(old.dump()), sample_deployment().request);
  // allow_reference under its former key (allow_judge_only) reads as it; both at once is refused.
  for (const bool allowed : {false, true}) {
    nlohmann::json former = nlohmann::json::parse(to_json(sample_deployment().request));
    former.erase("allow_reference");
    former["allow_judge_only"] = allowed;
    EXPECT_EQ(request_from_json(former.dump()).allow_reference, allowed);
    former["allow_reference"] = allowed;
    try {
      (void)request_from_json(former.dump());
      ADD_FAILURE() << "accepted both allow_reference and allow_judge_only";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr("both allow_reference and its former key allow_judge_only"));
    }
  }
  // A report written with the reason code's former name (judge_only) reads as reference_only.
  EXPECT_EQ(parse_reason_code("judge_only"), ReasonCode::reference_only);
  EXPECT_EQ(parse_reason_code("reference_only"), ReasonCode::reference_only);

  // A placement table's entries are ranks, never wrapped into an int; whether the table fits
  // the layer and the group is placement_of's (the expert_parallel reason).
  EXPECT_THAT(error_with("request", "placement", nlohmann::json::array({0, 70000})),
              HasSubstr("\"placement\": entry 1: expected an integer in [0, 65535], got 70000"));
  EXPECT_THAT(error_with("request", "placement", nlohmann::json::array({0, -1})),
              HasSubstr("\"placement\": entry 1: expected an integer in [0, 65535], got -1"));
  EXPECT_THAT(error_with("request", "placement", nlohmann::json::array({0, 1.5})),
              HasSubstr("\"placement\": entry 1: expected an integer in [0, 65535], got 1.5"));
  EXPECT_THAT(error_with("request", "placement", 3), HasSubstr("\"placement\": expected an array"));
  EXPECT_THAT(error_with("request", "placment", nlohmann::json::array()),
              HasSubstr("unknown field \"placment\""));
  mxmoe::Request placed = sample_deployment().request;
  placed.ep_size = 2;
  placed.placement = {1, 0, 1, 1};
  EXPECT_EQ(request_from_json(to_json(placed)), placed);
}

TEST(Json, SelectionRoundTripsWithReasonsAndSuggestions) {
  BackendCapabilities not_invariant = portable_caps();
  not_invariant.batch_invariant_activations = {ActivationFormat::f32};
  const StubBackend a("a", with_isa(portable_caps(), {"amx_int8"}), 1.0 / 3.0);
  const StubBackend b("b", not_invariant, 2.5);
  Deployment d = sample_deployment();
  d.hardware.isa.amx_int8 = false;
  d.request.batch_invariant = true;
  const Selection failed = judge(d, Preferences{}, candidates(a, b));
  ASSERT_FALSE(failed.suggestions.empty());
  EXPECT_EQ(selection_from_json(to_json(failed)), failed);

  d.request.batch_invariant = false;
  d.hardware.isa.amx_int8 = true;
  const Selection chosen = judge(d, preferences_for(Family::deepseek_v4), candidates(a, b));
  ASSERT_EQ(chosen.chosen, "a");
  EXPECT_EQ(chosen.candidates.front().numerics_class, "stub");  // the backend's own
  EXPECT_EQ(selection_from_json(to_json(chosen)), chosen);      // 1/3 survives the text form
  // A selection written before verdicts named their numerics class still reads.
  std::string older = to_json(chosen);
  for (std::size_t at; (at = older.find("\"numerics_class\": \"stub\",")) != std::string::npos;)
    older.erase(at, std::string("\"numerics_class\": \"stub\",").size());
  ASSERT_EQ(older.find("numerics_class"), std::string::npos) << older;
  EXPECT_EQ(selection_from_json(older).candidates.front().numerics_class, "");
}

TEST(Json, UnknownAndMissingKeysAreNamed) {
  const std::string good = to_json(sample_deployment());
  auto expect_error = [](const std::string& text, const std::string& needle) {
    try {
      (void)deployment_from_json(text);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr(needle));
    }
  };
  std::string typo = good;
  typo.replace(typo.find("\"top_k\""), 7, "\"topk\"");
  expect_error(typo, "topk");
  std::string missing = good;
  missing.replace(missing.find("\"batch_invariant\": false,"), 25, "");
  expect_error(missing, "missing field \"batch_invariant\"");
  std::string feature = good;
  feature.replace(feature.find("\"avx512_vnni\""), 13, "\"avx512vnni\"");
  expect_error(feature, "avx512vnni");
  expect_error("{", "invalid JSON");
  std::string bad_enum = good;
  bad_enum.replace(bad_enum.find("\"swiglu_oai\""), 12, "\"gelu\"");
  expect_error(bad_enum, "valid: swiglu_oai, silu_glu, silu_glu_clamp");
}

TEST(Json, EnumNamesRoundTripAndParseErrorsListValidNames) {
  for (ActivationFormat f : all_activation_formats())
    EXPECT_EQ(parse_activation_format(to_string(f)), f);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(parse_family(to_string(static_cast<Family>(i))), static_cast<Family>(i));
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(parse_routing_method(to_string(static_cast<RoutingMethod>(i))),
              static_cast<RoutingMethod>(i));
  EXPECT_EQ(parse_gate_up_layout("halves"), GateUpLayout::halves);
  EXPECT_EQ(parse_weight_format("mxfp4"), ElementType::mxfp4);
  try {
    (void)parse_activation_format("fp8");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("unknown activation format 'fp8' (valid: f32, bf16, int8, mxfp8)"));
  }
}

}  // namespace
}  // namespace mxmoe::testing
