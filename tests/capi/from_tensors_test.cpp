// mxmoe_layer_create_from_tensors through the shared library: a layer on the caller's tensors
// (filled in by C code, from_tensors.c) gives the bits of the same bytes loaded from a
// checkpoint; a caller built against an older header (a smaller struct_size) and one built
// against a newer header are both understood; every failure is a status with the reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "from_tensors_c.h"
#include "mxmoe/mxmoe.h"
#include "mxmoe/mxmoe.hpp"

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kE = 8, kK = 2, kH = 64, kI = 96, kTokens = 5;

// A checkpoint of PRESET at the test's sizes, written once by the mxmoe command.
std::string generated(const std::string& preset) {
  const std::string d = (std::filesystem::temp_directory_path() /
                         ("mxmoe_capi_tensors_" + preset + "_" + std::to_string(::getpid())))
                            .string();
  const std::string cmd = std::string(MXMOE_CLI_COMMAND) + " synth --preset " + preset +
                          " --experts 8 --top-k 2 --hidden 64 --intermediate 96 --force --out " +
                          d + " 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) std::abort();
  return d;
}

const std::string& gpt_oss_dir() {
  static const std::string d = generated("gpt-oss-20b");
  return d;
}
const std::string& qwen_dir() {
  static const std::string d = generated("qwen3-30b-a3b");
  return d;
}

struct Cleanup : ::testing::Environment {
  void TearDown() override {
    std::filesystem::remove_all(gpt_oss_dir());
    std::filesystem::remove_all(qwen_dir());
  }
};
const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new Cleanup);

mxmoe_dtype dtype_of(const mxmoe::DenseView& v) {
  return v.dtype == mxmoe::ElementType::f32 ? MXMOE_DTYPE_F32 : MXMOE_DTYPE_BF16;
}

// The checkpoint's layer 0 bytes (each tensor one contiguous run in the mapping) as the C
// struct of from_tensors_c.h.
c_gpt_oss_tensors gpt_oss_tensors(const mxmoe::LayerWeights& w, bool router = true) {
  c_gpt_oss_tensors t{};
  t.w13_blocks = w.w1.segment(0, 0).blocks;
  t.w13_scales = w.w1.segment(0, 0).scales;
  t.w2_blocks = w.w2.segment(0, 0).blocks;
  t.w2_scales = w.w2.segment(0, 0).scales;
  t.w13_bias = w.b1.data;
  t.w2_bias = w.b2.data;
  EXPECT_EQ(w.b1.dtype, w.router_weight.dtype);
  t.dense_dtype = dtype_of(w.b1);
  if (router) {
    t.router_weight = w.router_weight.data;
    t.router_bias = w.router_bias.data;
  }
  t.experts = kE;
  t.hidden = kH;
  t.intermediate = kI;
  t.top_k = kK;
  return t;
}

std::vector<float> random_x(unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(kTokens * kH));
  for (float& v : x) v = n(rng);
  return x;
}

const std::vector<std::int32_t> kIds = {0, 3, 1, 2, 7, 5, 4, 6, 2, 1};
const std::vector<float> kWeights = {0.7f, 0.3f, 0.5f, 0.5f, 0.9f, 0.1f, 0.25f, 0.75f, 0.6f, 0.4f};

// forward_routed's output, then forward's when the layer has a router.
std::vector<float> outputs(mxmoe_layer* layer, bool router) {
  const std::vector<float> x = random_x(3);
  std::vector<float> y(x.size() * (router ? 2 : 1));
  EXPECT_EQ(mxmoe_layer_forward_routed_f32(layer, x.data(), kIds.data(), kWeights.data(), kTokens,
                                           y.data()),
            MXMOE_OK)
      << mxmoe_last_error();
  if (router) {
    EXPECT_EQ(mxmoe_layer_forward_f32(layer, x.data(), kTokens, y.data() + x.size()), MXMOE_OK)
        << mxmoe_last_error();
  }
  return y;
}

mxmoe_request_params params_for(const char* backend) {
  mxmoe_request_params p = mxmoe_request_default_params();
  p.backend = backend;
  p.threads = 2;
  if (backend != nullptr) p.activation = MXMOE_ACTIVATION_F32;
  return p;
}

std::vector<float> checkpoint_outputs(const std::string& dir, const mxmoe_request_params& p) {
  mxmoe_checkpoint* c = nullptr;
  EXPECT_EQ(mxmoe_checkpoint_open(dir.c_str(), &c), MXMOE_OK) << mxmoe_last_error();
  mxmoe_layer* layer = nullptr;
  EXPECT_EQ(mxmoe_layer_create(c, 0, &p, &layer), MXMOE_OK) << mxmoe_last_error();
  mxmoe_checkpoint_close(c);
  std::vector<float> y = outputs(layer, true);
  mxmoe_layer_destroy(layer);
  return y;
}

// The reference, and the oracle's choice where the build has kernels it may choose (x86-64,
// aarch64; a build for another architecture has only the judge-only reference).
#if defined(__x86_64__) || defined(__aarch64__)
constexpr const char* kBackendsToTry[] = {"reference", nullptr};
#else
constexpr const char* kBackendsToTry[] = {"reference"};
#endif

TEST(CApiFromTensors, FromCGivesTheCheckpointsBits) {
  const mxmoe::Checkpoint c = mxmoe::Checkpoint::open(gpt_oss_dir());
  const mxmoe::LayerWeights w = c.layer_weights(0);
  const c_gpt_oss_tensors t = gpt_oss_tensors(w);
  // The reference (reads the caller's bytes) and the oracle's choice (on x86, one that packs).
  for (const char* backend : kBackendsToTry) {
    SCOPED_TRACE(backend != nullptr ? backend : "the oracle's choice");
    const mxmoe_request_params p = params_for(backend);
    mxmoe_layer* layer = nullptr;
    ASSERT_EQ(c_gpt_oss_layer(&t, C_CALLER_CURRENT, &p, &layer), MXMOE_OK) << mxmoe_last_error();
    mxmoe_layer_info info = mxmoe_layer_info_default();
    ASSERT_EQ(mxmoe_layer_get_info(layer, &info), MXMOE_OK);
    EXPECT_EQ(info.num_experts, kE);
    EXPECT_EQ(info.top_k, kK);
    EXPECT_EQ(info.hidden, kH);
    EXPECT_EQ(info.intermediate, kI);
    bool reads = false;
    ASSERT_EQ(mxmoe_layer_reads_source_weights(layer, &reads), MXMOE_OK);
    char* selection = nullptr;
    ASSERT_EQ(mxmoe_layer_selection_json(layer, &selection), MXMOE_OK);
    const bool reference = nlohmann::json::parse(selection)["chosen"] == "reference";
    mxmoe_free(selection);
    EXPECT_EQ(reads, reference);
    EXPECT_EQ(outputs(layer, true), checkpoint_outputs(gpt_oss_dir(), p));
    mxmoe_layer_destroy(layer);
  }
}

// Issue 38: an output over the weights a layer reads in place (the reference backend) was
// accepted; the first answer was right, every later one silently wrong. Refused now, naming
// them, and the weights are left as they were.
TEST(CApiFromTensors, AnOutputOverTheWeightsTheLayerReadsIsRefused) {
  const mxmoe::Checkpoint c = mxmoe::Checkpoint::open(gpt_oss_dir());
  const mxmoe::LayerWeights w = c.layer_weights(0);
  ASSERT_EQ(w.b2.dtype, mxmoe::ElementType::f32);
  const auto* b2 = static_cast<const float*>(w.b2.data);
  std::vector<float> w2_bias(b2, b2 + kE * kH);  // the caller's own, writable copy
  c_gpt_oss_tensors t = gpt_oss_tensors(w);
  t.w2_bias = w2_bias.data();
  const mxmoe_request_params p = params_for("reference");
  mxmoe_layer* layer = nullptr;
  ASSERT_EQ(c_gpt_oss_layer(&t, C_CALLER_CURRENT, &p, &layer), MXMOE_OK) << mxmoe_last_error();
  bool reads = false;
  ASSERT_EQ(mxmoe_layer_reads_source_weights(layer, &reads), MXMOE_OK);
  ASSERT_TRUE(reads);
  const std::vector<float> x = random_x(5);
  std::vector<float> y(x.size());
  ASSERT_EQ(mxmoe_layer_forward_f32(layer, x.data(), kTokens, y.data()), MXMOE_OK);
  const std::vector<float> before = w2_bias;
  EXPECT_EQ(mxmoe_layer_forward_f32(layer, x.data(), kTokens, w2_bias.data() + 7),
            MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("y: overlaps w2 bias"));
  EXPECT_EQ(mxmoe_layer_forward_routed_f32(layer, x.data(), kIds.data(), kWeights.data(), kTokens,
                                           w2_bias.data() + kE * kH - 1),
            MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("y: overlaps w2 bias"));
  EXPECT_EQ(w2_bias, before);
  std::vector<float> again(x.size());
  ASSERT_EQ(mxmoe_layer_forward_f32(layer, x.data(), kTokens, again.data()), MXMOE_OK);
  EXPECT_EQ(again, y);
  mxmoe_layer_destroy(layer);
}

TEST(CApiFromTensors, AnOldCallersSmallerStructKeepsTheDefaults) {
  const mxmoe::Checkpoint c = mxmoe::Checkpoint::open(gpt_oss_dir());
  const mxmoe::LayerWeights w = c.layer_weights(0);
  const c_gpt_oss_tensors t = gpt_oss_tensors(w);
  const mxmoe_request_params p = params_for("reference");
  mxmoe_layer* current = nullptr;
  mxmoe_layer* old = nullptr;
  ASSERT_EQ(c_gpt_oss_layer(&t, C_CALLER_CURRENT, &p, &current), MXMOE_OK) << mxmoe_last_error();
  // The garbage past the old struct_size (an unknown activation, alpha -1, ...) is never read.
  ASSERT_EQ(c_gpt_oss_layer(&t, C_CALLER_OLD, &p, &old), MXMOE_OK) << mxmoe_last_error();
  EXPECT_EQ(outputs(old, true), outputs(current, true));
  mxmoe_layer_destroy(old);
  mxmoe_layer_destroy(current);
}

// The struct in a buffer of SIZE bytes (a caller's struct of another version): this header's
// fields first, then zeros.
struct Versioned {
  std::vector<unsigned char> bytes;
  Versioned(const mxmoe_layer_tensors& t, std::size_t size) : bytes(std::max(size, sizeof t), 0) {
    std::memcpy(bytes.data(), &t, sizeof t);
    std::memcpy(bytes.data(), &size, sizeof size);
  }
  const mxmoe_layer_tensors* get() const {
    return reinterpret_cast<const mxmoe_layer_tensors*>(bytes.data());
  }
};

mxmoe_layer_tensors fused(const mxmoe::LayerWeights& w) {
  mxmoe_layer_tensors t = mxmoe_layer_tensors_default();
  t.family = "gpt_oss";
  t.top_k = kK;
  const auto u8 = [](const void* data, std::int64_t a, std::int64_t b, std::int64_t c) {
    return mxmoe_tensor{data, MXMOE_DTYPE_U8, 3, {a, b, c, 0}};
  };
  t.w13_blocks = u8(w.w1.segment(0, 0).blocks, kE, 2 * kI, kH / 2);
  t.w13_scales = u8(w.w1.segment(0, 0).scales, kE, 2 * kI, kH / 32);
  t.w2_blocks = u8(w.w2.segment(0, 0).blocks, kE, kH, kI / 2);
  t.w2_scales = u8(w.w2.segment(0, 0).scales, kE, kH, kI / 32);
  t.w13_bias = {w.b1.data, dtype_of(w.b1), 2, {kE, 2 * kI, 0, 0}};
  t.w2_bias = {w.b2.data, dtype_of(w.b2), 2, {kE, kH, 0, 0}};
  return t;
}

// Any integer in an enum field, as a C caller may store one.
template <class Enum>
void store(Enum& field, int value) {
  std::memcpy(&field, &value, sizeof value);
}

std::string create_error(const mxmoe_layer_tensors* t, mxmoe_status want,
                         const mxmoe_request_params& p = params_for("reference")) {
  mxmoe_layer* layer = nullptr;
  EXPECT_EQ(mxmoe_layer_create_from_tensors(t, &p, nullptr, &layer), want);
  EXPECT_EQ(layer, nullptr);  // out-parameters unchanged on failure
  return mxmoe_last_error();
}

TEST(CApiFromTensors, AStructOfAnotherVersion) {
  const mxmoe::Checkpoint c = mxmoe::Checkpoint::open(gpt_oss_dir());
  const mxmoe_layer_tensors t = fused(c.layer_weights(0));
  const mxmoe_request_params p = params_for("reference");
  // A newer caller's larger struct whose extra fields are zero (their defaults) is accepted.
  const Versioned newer(t, sizeof t + 16);
  mxmoe_layer* layer = nullptr;
  ASSERT_EQ(mxmoe_layer_create_from_tensors(newer.get(), &p, nullptr, &layer), MXMOE_OK)
      << mxmoe_last_error();
  mxmoe_layer_destroy(layer);
  // ... but a field this library does not know that is set is refused, not ignored.
  Versioned set(t, sizeof t + 16);
  set.bytes[sizeof t + 3] = 1;
  EXPECT_THAT(create_error(set.get(), MXMOE_ERROR_INVALID_ARGUMENT),
              AllOf(HasSubstr("struct_size = " + std::to_string(sizeof t + 16)),
                    HasSubstr("does not know")));
  // A size that ends inside a field is no version of the struct.
  const Versioned torn(t, offsetof(mxmoe_layer_tensors, family) + 4);
  EXPECT_THAT(create_error(torn.get(), MXMOE_ERROR_INVALID_ARGUMENT),
              HasSubstr("ends inside the field family"));
  // A struct that ends before the tensors: they keep their defaults (none), which is refused.
  const Versioned ancient(t, offsetof(mxmoe_layer_tensors, w13_blocks));
  EXPECT_THAT(create_error(ancient.get(), MXMOE_ERROR_INVALID_ARGUMENT),
              HasSubstr("no expert weights"));
}

TEST(CApiFromTensors, PerExpertTensorsPointIntoTheCallersMemory) {
  const mxmoe::Checkpoint c = mxmoe::Checkpoint::open(qwen_dir());
  const mxmoe::LayerWeights w = c.layer_weights(0);
  // Qwen3's halves: expert e's gate rows, then its up rows, cut into w1[e] and w3[e].
  std::vector<mxmoe_tensor> w1b, w1s, w3b, w3s, w2b, w2s;
  const auto rows = [](const std::uint8_t* base, std::int64_t first, std::int64_t count,
                       std::int64_t width) {
    return mxmoe_tensor{base + first * width, MXMOE_DTYPE_U8, 2, {count, width, 0, 0}};
  };
  for (std::int64_t e = 0; e < kE; ++e) {
    const std::uint8_t* b1 = w.w1.segment(0, 0).blocks;
    const std::uint8_t* s1 = w.w1.segment(0, 0).scales;
    w1b.push_back(rows(b1, e * 2 * kI, kI, kH / 2));
    w3b.push_back(rows(b1, e * 2 * kI + kI, kI, kH / 2));
    w1s.push_back(rows(s1, e * 2 * kI, kI, kH / 32));
    w3s.push_back(rows(s1, e * 2 * kI + kI, kI, kH / 32));
    w2b.push_back(rows(w.w2.segment(0, 0).blocks, e * kH, kH, kI / 2));
    w2s.push_back(rows(w.w2.segment(0, 0).scales, e * kH, kH, kI / 32));
  }
  mxmoe_layer_tensors t = mxmoe_layer_tensors_default();
  t.family = "qwen3_moe";
  t.top_k = kK;
  t.num_experts = kE;
  t.w1_blocks = w1b.data();
  t.w1_scales = w1s.data();
  t.w3_blocks = w3b.data();
  t.w3_scales = w3s.data();
  t.w2_expert_blocks = w2b.data();
  t.w2_expert_scales = w2s.data();
  t.router_weight = {w.router_weight.data, dtype_of(w.router_weight), 2, {kE, kH, 0, 0}};
  for (const char* backend : kBackendsToTry) {
    const mxmoe_request_params p = params_for(backend);
    mxmoe_layer* layer = nullptr;
    ASSERT_EQ(mxmoe_layer_create_from_tensors(&t, &p, nullptr, &layer), MXMOE_OK)
        << mxmoe_last_error();
    EXPECT_EQ(outputs(layer, true), checkpoint_outputs(qwen_dir(), p));
    mxmoe_layer_destroy(layer);
  }
  // One expert's tensor of the wrong shape is named with its index.
  w3s[5].shape[1] = kH / 16;
  EXPECT_THAT(create_error(&t, MXMOE_ERROR_INVALID_ARGUMENT),
              HasSubstr("w3_scales[5] has shape [96, 4], expected [96, 2]"));
  w3s[5].shape[1] = kH / 32;
  t.w2_expert_scales = nullptr;
  EXPECT_THAT(create_error(&t, MXMOE_ERROR_INVALID_ARGUMENT),
              HasSubstr("w2_expert_scales must point to num_experts tensors"));
}

TEST(CApiFromTensors, FailuresAreStatusesWithTheReason) {
  const mxmoe::Checkpoint c = mxmoe::Checkpoint::open(gpt_oss_dir());
  const mxmoe::LayerWeights w = c.layer_weights(0);
  const mxmoe_layer_tensors good = fused(w);
  const mxmoe_request_params p = params_for("reference");
  mxmoe_layer* layer = nullptr;
  EXPECT_EQ(mxmoe_layer_create_from_tensors(nullptr, &p, nullptr, &layer),
            MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("must not be NULL"));
  EXPECT_EQ(mxmoe_layer_create_from_tensors(&good, nullptr, nullptr, &layer),
            MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mxmoe_layer_create_from_tensors(&good, &p, nullptr, nullptr),
            MXMOE_ERROR_INVALID_ARGUMENT);
  const auto with = [&](auto change, mxmoe_status want = MXMOE_ERROR_INVALID_ARGUMENT) {
    mxmoe_layer_tensors t = good;
    change(t);
    return create_error(&t, want);
  };
  EXPECT_THAT(with([](mxmoe_layer_tensors& t) { t.family = nullptr; }),
              HasSubstr("tensors->family must name a model family"));
  EXPECT_THAT(with([](mxmoe_layer_tensors& t) { t.family = "llama"; }),
              AllOf(HasSubstr("tensors->family"), HasSubstr("llama"), HasSubstr("deepseek_v4")));
  EXPECT_THAT(with([](mxmoe_layer_tensors& t) { store(t.w13_scales.dtype, 42); }),
              HasSubstr("w13_scales.dtype: 42 is not an mxmoe_dtype"));
  EXPECT_THAT(with([](mxmoe_layer_tensors& t) { t.w2_blocks.ndim = 5; }),
              HasSubstr("w2_blocks.ndim must be in 1..4, got 5"));
  EXPECT_THAT(with([](mxmoe_layer_tensors& t) { t.w2_scales.data = nullptr; }),
              HasSubstr("w2_scales is missing"));
  EXPECT_THAT(with([](mxmoe_layer_tensors& t) { t.top_k = 9; }),
              HasSubstr("top_k = 9 must be in [1, num_experts = 8]"));
  EXPECT_THAT(with([](mxmoe_layer_tensors& t) { t.w13_blocks.shape[2] = 12; }),
              HasSubstr("hidden = 24 must be a positive multiple of 32"));
  EXPECT_THAT(with([](mxmoe_layer_tensors& t) { t.alpha = 1.5f, t.activation_fn = "silu_glu"; }),
              HasSubstr("alpha applies to the swiglu_oai activation only"));
  EXPECT_THAT(with([](mxmoe_layer_tensors& t) { t.renormalize = 2; }),
              HasSubstr("tensors->renormalize must be -1"));
  EXPECT_THAT(with([](mxmoe_layer_tensors& t) { store(t.gate_up, 7); }),
              HasSubstr("tensors->gate_up: 7"));
  EXPECT_THAT(with([](mxmoe_layer_tensors& t) { t.w13_bias.data = nullptr; }),
              HasSubstr("w13_bias is missing"));
  // Values, as a checkpoint's are refused: a NaN scale (in a copy of the scales).
  std::vector<std::uint8_t> scales(w.w1.segment(0, 0).scales,
                                   w.w1.segment(0, 0).scales + kE * 2 * kI * kH / 32);
  scales[static_cast<std::size_t>((3 * 2 * kI + 10) * (kH / 32))] = 0xFF;
  EXPECT_THAT(with([&](mxmoe_layer_tensors& t) { t.w13_scales.data = scales.data(); }),
              HasSubstr("w13_scales has the NaN scale 0xFF at expert 3, row 10, block 0"));
  // Nothing fits: every backend and every reason.
  mxmoe_request_params none = mxmoe_request_default_params();
  std::string every_backend;  // from the registry: a backend added later is excluded too
  for (const std::string& name : mxmoe::registered_backend_names()) {
    if (!every_backend.empty()) every_backend += ',';
    every_backend += name;
  }
  none.excluded_backends = every_backend.c_str();
  layer = nullptr;
  EXPECT_EQ(mxmoe_layer_create_from_tensors(&good, &none, nullptr, &layer), MXMOE_ERROR_NO_BACKEND);
  EXPECT_THAT(mxmoe_last_error(),
              AllOf(HasSubstr("No MXFP4 MoE backend supports the deployment configuration."),
                    HasSubstr("user_excluded")));
  // Without a router, forward is refused with the reason (never computed from garbage), and
  // forward_routed runs; a second layer can share the first one's thread pools.
  ASSERT_EQ(mxmoe_layer_create_from_tensors(&good, &p, nullptr, &layer), MXMOE_OK)
      << mxmoe_last_error();
  mxmoe_layer* second = nullptr;
  ASSERT_EQ(mxmoe_layer_create_from_tensors(&good, &p, layer, &second), MXMOE_OK)
      << mxmoe_last_error();
  const std::vector<float> x = random_x(4);
  std::vector<float> y(x.size(), 0.0f);
  EXPECT_EQ(mxmoe_layer_forward_f32(layer, x.data(), kTokens, y.data()),
            MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("has no router weights"));
  EXPECT_EQ(y, std::vector<float>(x.size(), 0.0f));
  EXPECT_EQ(outputs(second, false), outputs(layer, false));
  bool reads = false;
  EXPECT_EQ(mxmoe_layer_reads_source_weights(nullptr, &reads), MXMOE_ERROR_INVALID_ARGUMENT);
  mxmoe_layer_destroy(layer);
  mxmoe_layer_destroy(second);
}

}  // namespace
