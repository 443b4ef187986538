// The C API (include/mxmoe/mxmoe.h) through the shared library, as an engine links it: the
// same bits as the C++ API, statuses instead of exceptions for every failure, and the
// thread-local last-error text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_process.hpp"
#include "mxmoe/mxmoe.h"
#include "mxmoe/mxmoe.hpp"

namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A small generated DeepSeek-V3-style checkpoint (shared expert, selection bias), written
// once for the test program by the mxmoe command itself.
const std::string& checkpoint_dir() {
  static const std::string dir = [] {
    const std::string d =
        (std::filesystem::temp_directory_path() / ("mxmoe_capi_" + std::to_string(::getpid())))
            .string();
    const std::string cmd = std::string(MXMOE_CLI_COMMAND) +
                            " synth --preset deepseek-v3 --experts 8 --top-k 2 --hidden 64 "
                            "--intermediate 32 --layers 2 --force --out " +
                            d + " 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) std::abort();
    return d;
  }();
  return dir;
}

struct Cleanup : ::testing::Environment {
  void TearDown() override { std::filesystem::remove_all(checkpoint_dir()); }
};
const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new Cleanup);

mxmoe_checkpoint* open_checkpoint() {
  mxmoe_checkpoint* c = nullptr;
  EXPECT_EQ(mxmoe_checkpoint_open(checkpoint_dir().c_str(), &c), MXMOE_OK) << mxmoe_last_error();
  return c;
}

mxmoe_communicator communicator(int32_t rank, int32_t size, mxmoe_exchange_fn exchange,
                                void* context) {
  mxmoe_communicator c = mxmoe_communicator_default();
  c.rank = rank;
  c.size = size;
  c.exchange = exchange;
  c.context = context;
  return c;
}

mxmoe_request_params reference_f32() {
  mxmoe_request_params p = mxmoe_request_default_params();
  p.activation = MXMOE_ACTIVATION_F32;
  p.backend = "reference";
  p.threads = 2;
  return p;
}

std::vector<float> random_x(int tokens, int hidden, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens * hidden));
  for (float& v : x) v = n(rng);
  return x;
}

// A checkpoint's layer through the C++ API, on the reference backend in f32: what the C
// layers are compared with.
mxmoe::MoeLayer reference_cpp_layer(const mxmoe::Checkpoint& c, int layer,
                                    mxmoe::Runtime& runtime) {
  mxmoe::Request r;
  r.activation = mxmoe::ActivationFormat::f32;
  r.forced_backend = "reference";
  return mxmoe::make_layer(c.layer_spec(layer), c.layer_weights(layer), mxmoe::probe_hardware(), r,
                           runtime);
}

TEST(CApi, VersionAndDefaults) {
  EXPECT_STREQ(mxmoe_version(), "0.1.0");
  const mxmoe_request_params p = mxmoe_request_default_params();
  EXPECT_EQ(p.activation, MXMOE_ACTIVATION_DEFAULT);
  EXPECT_FALSE(p.batch_invariant);
  EXPECT_EQ(p.threads, 0);
  EXPECT_EQ(p.backend, nullptr);
  EXPECT_EQ(p.tokens_hint, 1);
  EXPECT_EQ(p.ep_size, 1);
  EXPECT_EQ(static_cast<int>(MXMOE_ERROR_NO_BACKEND), 3);  // the CLI's exit code
}

TEST(CApi, SameBitsAsTheCppApi) {
  mxmoe_checkpoint* c = open_checkpoint();
  int32_t layers = 0;
  ASSERT_EQ(mxmoe_checkpoint_num_layers(c, &layers), MXMOE_OK);
  EXPECT_EQ(layers, 2);
  bool moe = false;
  ASSERT_EQ(mxmoe_checkpoint_is_moe_layer(c, 1, &moe), MXMOE_OK);
  EXPECT_TRUE(moe);

  const mxmoe_request_params p = reference_f32();
  mxmoe_layer* layer = nullptr;
  ASSERT_EQ(mxmoe_layer_create(c, 1, &p, &layer), MXMOE_OK) << mxmoe_last_error();
  mxmoe_checkpoint_close(c);  // the layer keeps the mapping alive
  mxmoe_layer_info info = mxmoe_layer_info_default();
  ASSERT_EQ(mxmoe_layer_get_info(layer, &info), MXMOE_OK);
  EXPECT_EQ(info.num_experts, 8);
  EXPECT_EQ(info.top_k, 2);
  EXPECT_EQ(info.hidden, 64);
  EXPECT_EQ(info.expert_end - info.expert_begin, 8);

  // The same layer through the C++ API.
  const mxmoe::Checkpoint cc = mxmoe::Checkpoint::open(checkpoint_dir());
  mxmoe::Runtime runtime(2);
  mxmoe::MoeLayer cpp = reference_cpp_layer(cc, 1, runtime);

  constexpr int kTokens = 9;
  const std::vector<float> x = random_x(kTokens, info.hidden, 1);
  std::vector<float> y_c(x.size()), y_cpp(x.size());
  ASSERT_EQ(mxmoe_layer_forward_f32(layer, x.data(), kTokens, y_c.data()), MXMOE_OK);
  cpp.forward({.tokens = kTokens, .x = x.data(), .y = y_cpp.data()});
  EXPECT_EQ(std::memcmp(y_c.data(), y_cpp.data(), x.size() * sizeof(float)), 0);

  std::vector<int32_t> ids(kTokens * 2);
  std::vector<float> w(ids.size());
  for (int t = 0; t < kTokens; ++t) {
    ids[static_cast<std::size_t>(2 * t)] = t % 8;
    ids[static_cast<std::size_t>(2 * t + 1)] = (t + 3) % 8;
    w[static_cast<std::size_t>(2 * t)] = 0.75f;
    w[static_cast<std::size_t>(2 * t + 1)] = 0.25f;
  }
  ASSERT_EQ(
      mxmoe_layer_forward_routed_f32(layer, x.data(), ids.data(), w.data(), kTokens, y_c.data()),
      MXMOE_OK);
  cpp.forward({.tokens = kTokens,
               .x = x.data(),
               .y = y_cpp.data(),
               .expert_ids = ids.data(),
               .expert_weights = w.data()});
  EXPECT_EQ(std::memcmp(y_c.data(), y_cpp.data(), x.size() * sizeof(float)), 0);

  std::vector<uint16_t> xb(x.size()), yb_c(x.size()), yb_cpp(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) xb[i] = mxmoe::f32_to_bf16(x[i]);
  ASSERT_EQ(mxmoe_layer_forward_bf16(layer, xb.data(), kTokens, yb_c.data()), MXMOE_OK);
  cpp.forward({.tokens = kTokens, .x_bf16 = xb.data(), .y_bf16 = yb_cpp.data()});
  EXPECT_EQ(yb_c, yb_cpp);
  ASSERT_EQ(
      mxmoe_layer_forward_routed_bf16(layer, xb.data(), ids.data(), w.data(), kTokens, yb_c.data()),
      MXMOE_OK);
  cpp.forward({.tokens = kTokens,
               .x_bf16 = xb.data(),
               .y_bf16 = yb_cpp.data(),
               .expert_ids = ids.data(),
               .expert_weights = w.data()});
  EXPECT_EQ(yb_c, yb_cpp);

  char* json = nullptr;
  ASSERT_EQ(mxmoe_layer_selection_json(layer, &json), MXMOE_OK);
  const auto selection = nlohmann::json::parse(json);
  mxmoe_free(json);
  EXPECT_EQ(selection.at("chosen"), "reference");
  EXPECT_EQ(selection.at("candidates").size(), mxmoe::registered_backend_names().size());
  mxmoe_layer_destroy(layer);
}

// DeepSeek-V4's hash layers take the tokens' ids: the C API's forward_tokens gives the C++
// forward's bits; without ids (or with an id out of range) a status and the reason.
TEST(CApi, HashLayersTakeTokenIds) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("mxmoe_capi_v4_" + std::to_string(::getpid())))
          .string();
  const std::string cmd = std::string(MXMOE_CLI_COMMAND) +
                          " synth --preset deepseek-v4-flash --experts 8 --top-k 2 "
                          "--hidden 64 --intermediate 32 --layers 2 --hash-layers 1 --vocab 100 "
                          "--force --out " +
                          dir + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  mxmoe_checkpoint* c = nullptr;
  ASSERT_EQ(mxmoe_checkpoint_open(dir.c_str(), &c), MXMOE_OK) << mxmoe_last_error();
  const mxmoe_request_params p = reference_f32();
  mxmoe_layer *hash = nullptr, *routed = nullptr;
  ASSERT_EQ(mxmoe_layer_create(c, 0, &p, &hash), MXMOE_OK) << mxmoe_last_error();
  ASSERT_EQ(mxmoe_layer_create(c, 1, &p, &routed), MXMOE_OK) << mxmoe_last_error();
  mxmoe_checkpoint_close(c);
  int32_t vocab = -1;
  ASSERT_EQ(mxmoe_layer_vocab(hash, &vocab), MXMOE_OK);
  EXPECT_EQ(vocab, 100);
  ASSERT_EQ(mxmoe_layer_vocab(routed, &vocab), MXMOE_OK);
  EXPECT_EQ(vocab, 0);

  constexpr int kTokens = 5;
  const std::vector<float> x = random_x(kTokens, 64, 4);
  std::vector<float> y(x.size()), y_cpp(x.size());
  const int32_t ids[kTokens] = {0, 99, 42, 42, 7};
  EXPECT_EQ(mxmoe_layer_forward_f32(hash, x.data(), kTokens, y.data()),
            MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("pass the tokens' ids"));
  const int32_t bad[kTokens] = {0, 100, 1, 2, 3};
  EXPECT_EQ(mxmoe_layer_forward_tokens_f32(hash, x.data(), bad, kTokens, y.data()),
            MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("token id 100 of token 1"));
  ASSERT_EQ(mxmoe_layer_forward_tokens_f32(hash, x.data(), ids, kTokens, y.data()), MXMOE_OK)
      << mxmoe_last_error();

  const mxmoe::Checkpoint cc = mxmoe::Checkpoint::open(dir);
  mxmoe::Runtime runtime(2);
  mxmoe::MoeLayer cpp = reference_cpp_layer(cc, 0, runtime);
  cpp.forward({.tokens = kTokens, .x = x.data(), .y = y_cpp.data(), .token_ids = ids});
  EXPECT_EQ(std::memcmp(y.data(), y_cpp.data(), y.size() * sizeof(float)), 0);

  std::vector<uint16_t> xb(x.size()), yb(x.size()), yb_cpp(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) xb[i] = mxmoe::f32_to_bf16(x[i]);
  ASSERT_EQ(mxmoe_layer_forward_tokens_bf16(hash, xb.data(), ids, kTokens, yb.data()), MXMOE_OK);
  cpp.forward({.tokens = kTokens, .x_bf16 = xb.data(), .y_bf16 = yb_cpp.data(), .token_ids = ids});
  EXPECT_EQ(yb, yb_cpp);
  // A routed layer accepts ids (ignored) and NULL.
  ASSERT_EQ(mxmoe_layer_forward_tokens_f32(routed, x.data(), nullptr, kTokens, y.data()), MXMOE_OK);
  mxmoe_layer_destroy(hash);
  mxmoe_layer_destroy(routed);
  std::filesystem::remove_all(dir);
}

TEST(CApi, FailuresAreStatusesWithTheReason) {
  mxmoe_checkpoint* c = nullptr;
  EXPECT_EQ(mxmoe_checkpoint_open(nullptr, &c), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mxmoe_checkpoint_open("/nonexistent/mxmoe", &c), MXMOE_ERROR_IO);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("/nonexistent/mxmoe"));
  EXPECT_EQ(c, nullptr);  // out-parameters untouched on failure

  c = open_checkpoint();
  mxmoe_layer* layer = nullptr;
  mxmoe_request_params p = reference_f32();
  EXPECT_EQ(mxmoe_layer_create(c, 7, &p, &layer), MXMOE_ERROR_IO);  // no layer 7
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("layer 7"));
  p.threads = 5000;
  EXPECT_EQ(mxmoe_layer_create(c, 0, &p, &layer), MXMOE_ERROR_INVALID_ARGUMENT);
  p = reference_f32();
  const int unknown = 9;  // what a newer header's enumerator looks like to this library
  std::memcpy(&p.activation, &unknown, sizeof(unknown));
  EXPECT_EQ(mxmoe_layer_create(c, 0, &p, &layer), MXMOE_ERROR_INVALID_ARGUMENT);
  p = reference_f32();
  p.backend = "no_such_backend";
  EXPECT_EQ(mxmoe_layer_create(c, 0, &p, &layer), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("reference"));  // lists the valid names
  p.backend = "x\x1b[31m";  // a host's log gets the escape sequence escaped, not raw
  EXPECT_EQ(mxmoe_layer_create(c, 0, &p, &layer), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(mxmoe_last_error()).find('\x1b'), std::string::npos) << mxmoe_last_error();
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("x\\x1b[31m"));
  p = reference_f32();
  p.excluded_backends = "avx2,,no_such_one";  // split, then checked by the edges' one function
  EXPECT_EQ(mxmoe_layer_create(c, 0, &p, &layer), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(
      mxmoe_last_error(),
      HasSubstr("params.excluded_backends: unknown backend 'no_such_one'; valid backends: "));

  // Nothing fits: int8 activations forced onto the reference-free avx2 backend.
  p = mxmoe_request_default_params();
  p.activation = MXMOE_ACTIVATION_INT8;
  p.backend = "avx2";
  EXPECT_EQ(mxmoe_layer_create(c, 0, &p, &layer), MXMOE_ERROR_NO_BACKEND);
  EXPECT_THAT(mxmoe_last_error(),
              StartsWith("No MXFP4 MoE backend supports the deployment configuration."));
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("avx2"));
  EXPECT_EQ(layer, nullptr);

  p = reference_f32();
  ASSERT_EQ(mxmoe_layer_create(c, 0, &p, &layer), MXMOE_OK);
  const std::vector<float> x = random_x(1, 64, 2);
  std::vector<float> y(x.size());
  const int32_t repeated[2] = {3, 3}, out_of_range[2] = {1, 8};
  const float weights[2] = {0.5f, 0.5f};
  EXPECT_EQ(mxmoe_layer_forward_routed_f32(layer, x.data(), repeated, weights, 1, y.data()),
            MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mxmoe_layer_forward_routed_f32(layer, x.data(), out_of_range, weights, 1, y.data()),
            MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mxmoe_layer_forward_f32(layer, nullptr, 1, y.data()), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mxmoe_layer_forward_f32(layer, x.data(), -1, y.data()), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mxmoe_layer_forward_f32(layer, nullptr, 0, nullptr), MXMOE_OK);  // nothing to do
  EXPECT_EQ(mxmoe_layer_forward_f32(nullptr, x.data(), 1, y.data()), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mxmoe_layer_get_info(layer, nullptr), MXMOE_ERROR_INVALID_ARGUMENT);
  mxmoe_layer_destroy(layer);
  mxmoe_checkpoint_close(c);
  mxmoe_layer_destroy(nullptr);  // like free(NULL)
  mxmoe_checkpoint_close(nullptr);
  mxmoe_free(nullptr);
}

// The failure values are the command's exit codes for the same failure (docs/C_API.md, README
// "Exit codes"): each case is made once through the C API and once through `mxmoe`, and both
// numbers must equal the documented class (1 a file, 2 the caller's value, 3 nothing fits).
// A checkpoint file truncated after mxmoe_checkpoint_open mapped it: creating a layer is
// MXMOE_ERROR_IO naming the file (a read of a lost page was SIGBUS, killing the engine).
TEST(CApi, TruncatedShardIsAnIoErrorNamingTheFile) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("mxmoe_capi_cut_" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  std::filesystem::copy(checkpoint_dir(), dir);
  mxmoe_checkpoint* c = nullptr;
  ASSERT_EQ(mxmoe_checkpoint_open(dir.c_str(), &c), MXMOE_OK) << mxmoe_last_error();
  std::string truncated;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".safetensors") {
      std::filesystem::resize_file(entry.path(), 0);
      truncated = entry.path().filename().string();
    }
  ASSERT_FALSE(truncated.empty());
  for (const mxmoe_request_params& p : {reference_f32(), mxmoe_request_default_params()}) {
    mxmoe_layer* layer = nullptr;
    EXPECT_EQ(mxmoe_layer_create(c, 0, &p, &layer), MXMOE_ERROR_IO);
    EXPECT_THAT(mxmoe_last_error(), HasSubstr(".safetensors: the file changed on disk"));
  }
  mxmoe_checkpoint_close(c);
  std::filesystem::remove_all(dir);
}

TEST(CApi, StatusesEqualTheCommandsExitCodesForTheSameFailure) {
  namespace fs = std::filesystem;
  const std::string bad =
      (fs::temp_directory_path() / ("mxmoe_capi_bad_" + std::to_string(::getpid()))).string();
  fs::create_directories(bad);
  {
    std::ofstream(bad + "/config.json") << "{\"model_type\": \"gpt_oss\", ";  // truncated
  }
  const std::string ck = checkpoint_dir();
  struct Case {
    const char* what;
    int expected;
    std::string env, cli_args;                       // the command's form
    std::string dir;                                 // the C API's form: open DIR,
    int layer = 0;                                   // create LAYER with
    std::function<void(mxmoe_request_params&)> set;  // these parameters
    std::string c_env;                               // under this variable (NAME=VALUE)
  };
  const auto none = [](mxmoe_request_params&) {};
  const std::vector<Case> cases = {
      {"missing directory", 1, "", "explain --model /nonexistent/mxmoe", "/nonexistent/mxmoe", 0,
       none, ""},
      {"malformed config.json", 1, "", "explain --model " + bad, bad, 0, none, ""},
      {"layer out of range", 1, "", "explain --model " + ck + " --layer 7", ck, 7, none, ""},
      {"threads out of range", 2, "", "explain --model " + ck + " --threads 5000", ck, 0,
       [](mxmoe_request_params& p) { p.threads = 5000; }, ""},
      {"unknown backend", 2, "", "explain --model " + ck + " --backend no_such_backend", ck, 0,
       [](mxmoe_request_params& p) { p.backend = "no_such_backend"; }, ""},
      {"rank outside the group", 2, "", "explain --model " + ck + " --ep-size 2 --ep-rank 5", ck, 0,
       [](mxmoe_request_params& p) {
         p.ep_size = 2;
         p.ep_rank = 5;
       },
       ""},
      {"bad MXMOE_THREADS", 2, "MXMOE_THREADS=abc", "explain --model " + ck, ck, 0, none,
       "MXMOE_THREADS=abc"},
      {"bad MXMOE_MAX_ISA", 2, "MXMOE_MAX_ISA=sse9", "explain --model " + ck, ck, 0, none,
       "MXMOE_MAX_ISA=sse9"},
      {"nothing fits", 3, "", "explain --model " + ck + " --activation int8 --backend avx2", ck, 0,
       [](mxmoe_request_params& p) {
         p.activation = MXMOE_ACTIVATION_INT8;
         p.backend = "avx2";
       },
       ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const mxmoe::cli_testing::Result cli = mxmoe::cli_testing::run(c.env, c.cli_args);
    EXPECT_EQ(cli.rc, c.expected) << cli.err;

    std::string name, value;
    if (!c.c_env.empty()) {
      name = c.c_env.substr(0, c.c_env.find('='));
      value = c.c_env.substr(c.c_env.find('=') + 1);
      ::setenv(name.c_str(), value.c_str(), 1);
    }
    mxmoe_checkpoint* checkpoint = nullptr;
    mxmoe_status status = mxmoe_checkpoint_open(c.dir.c_str(), &checkpoint);
    if (status == MXMOE_OK) {
      mxmoe_request_params p = mxmoe_request_default_params();
      c.set(p);
      mxmoe_layer* layer = nullptr;
      status = mxmoe_layer_create(checkpoint, c.layer, &p, &layer);
      mxmoe_layer_destroy(layer);
      mxmoe_checkpoint_close(checkpoint);
    }
    if (!name.empty()) ::unsetenv(name.c_str());
    EXPECT_EQ(static_cast<int>(status), c.expected) << mxmoe_last_error();
    EXPECT_EQ(static_cast<int>(status), cli.rc);
  }
  fs::remove_all(bad);
}

// The MXMOE_* variables reach the C API through the library's one parser: a parameter left
// at its default takes the variable, a parameter the caller set wins.
TEST(CApi, DefaultParametersTakeTheEnvironment) {
  mxmoe_checkpoint* c = open_checkpoint();
  const auto chosen = [&](const mxmoe_request_params& p) {
    mxmoe_layer* layer = nullptr;
    const mxmoe_status status = mxmoe_layer_create(c, 0, &p, &layer);
    EXPECT_EQ(status, MXMOE_OK) << mxmoe_last_error();
    if (status != MXMOE_OK) return std::string();
    char* json = nullptr;
    EXPECT_EQ(mxmoe_layer_selection_json(layer, &json), MXMOE_OK);
    const std::string name = nlohmann::json::parse(json).at("chosen").get<std::string>();
    mxmoe_free(json);
    mxmoe_layer_destroy(layer);
    return name;
  };
  ::setenv("MXMOE_BACKEND", "reference", 1);
  ::setenv("MXMOE_ACTIVATION", "f32", 1);
  EXPECT_EQ(chosen(mxmoe_request_default_params()), "reference");
  mxmoe_request_params p = mxmoe_request_default_params();
  p.backend = "no_such_backend";  // the caller's value wins, and is checked
  mxmoe_layer* layer = nullptr;
  EXPECT_EQ(mxmoe_layer_create(c, 0, &p, &layer), MXMOE_ERROR_INVALID_ARGUMENT);
  ::unsetenv("MXMOE_BACKEND");
  ::unsetenv("MXMOE_ACTIVATION");
#if defined(__x86_64__)  // elsewhere only `reference` is compiled, and it is never chosen unasked
  EXPECT_NE(chosen(mxmoe_request_default_params()), "reference");  // never chosen unasked
#endif
  p = mxmoe_request_default_params();
  ::setenv("MXMOE_THREADS", "100000", 1);
  EXPECT_EQ(mxmoe_layer_create(c, 0, &p, &layer), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("MXMOE_THREADS"));
  ::unsetenv("MXMOE_THREADS");
  EXPECT_EQ(layer, nullptr);
  mxmoe_checkpoint_close(c);
}

TEST(CApi, ExplainJudgesADeploymentGivenAsJson) {
  mxmoe::Deployment d;
  d.layer = mxmoe::preset("gpt-oss-20b");
  d.hardware = mxmoe::probe_hardware();
  d.request.activation = mxmoe::ActivationFormat::f32;
  // Something fits on every build: a fast backend on x86, the judge where only it is compiled.
  d.request.allow_reference = true;
  char* out = nullptr;
  ASSERT_EQ(mxmoe_explain_json(mxmoe::to_json(d).c_str(), &out), MXMOE_OK) << mxmoe_last_error();
  const auto s = nlohmann::json::parse(out);
  mxmoe_free(out);
  EXPECT_FALSE(s.at("chosen").get<std::string>().empty());

  d.request.forced_backend = "avx2";
  d.request.activation = mxmoe::ActivationFormat::int8;
  out = nullptr;
  ASSERT_EQ(mxmoe_explain_json(mxmoe::to_json(d).c_str(), &out), MXMOE_ERROR_NO_BACKEND);
  ASSERT_NE(out, nullptr);  // the report is returned too
  EXPECT_EQ(nlohmann::json::parse(out).at("chosen"), "");
  mxmoe_free(out);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("activation_format"));

  out = nullptr;
  EXPECT_EQ(mxmoe_explain_json("{\"layer\": 1, \"layer\": 2}", &out), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mxmoe_explain_json("not json", &out), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mxmoe_explain_json(nullptr, &out), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
}

TEST(CApi, LastErrorBelongsToTheCallingThread) {
  mxmoe_checkpoint* c = nullptr;
  ASSERT_EQ(mxmoe_checkpoint_open("/nonexistent/a", &c), MXMOE_ERROR_IO);
  std::string other;
  std::thread t([&] {
    mxmoe_checkpoint* d = nullptr;
    (void)mxmoe_checkpoint_open("/nonexistent/b", &d);
    other = mxmoe_last_error();
  });
  t.join();
  EXPECT_THAT(other, HasSubstr("/nonexistent/b"));
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("/nonexistent/a"));
}

// Two layers of one checkpoint called from two threads at once: each gives the bits it
// gives alone (they share the checkpoint's pool; one of them may run on its caller alone).
TEST(CApi, TwoLayersInTwoThreads) {
  mxmoe_checkpoint* c = open_checkpoint();
  const mxmoe_request_params p = reference_f32();
  mxmoe_layer* a = nullptr;
  mxmoe_layer* b = nullptr;
  ASSERT_EQ(mxmoe_layer_create(c, 0, &p, &a), MXMOE_OK);
  ASSERT_EQ(mxmoe_layer_create(c, 1, &p, &b), MXMOE_OK);
  mxmoe_checkpoint_close(c);
  const std::vector<float> x = random_x(16, 64, 3);
  std::vector<float> ya(x.size()), yb(x.size());
  ASSERT_EQ(mxmoe_layer_forward_f32(a, x.data(), 16, ya.data()), MXMOE_OK);
  ASSERT_EQ(mxmoe_layer_forward_f32(b, x.data(), 16, yb.data()), MXMOE_OK);
  int mismatches = 0;
  const auto worker = [&](mxmoe_layer* l, const std::vector<float>& want) {
    std::vector<float> y(x.size());
    for (int i = 0; i < 50; ++i) {
      if (mxmoe_layer_forward_f32(l, x.data(), 16, y.data()) != MXMOE_OK || y != want) ++mismatches;
    }
  };
  std::thread ta(worker, a, ya), tb(worker, b, yb);
  ta.join();
  tb.join();
  EXPECT_EQ(mismatches, 0);
  mxmoe_layer_destroy(a);
  mxmoe_layer_destroy(b);
}

// The host's transport, as a C host would write it: here the library's in-process group (a
// mxmoe::Communicator per rank) stands for MPI. A failed exchange reports its reason.
int exchange_through(void* context, const mxmoe_message* sends, size_t num_sends,
                     const mxmoe_message* recvs, size_t num_recvs, char* error, size_t error_size) {
  auto* comm = static_cast<mxmoe::Communicator*>(context);
  std::vector<mxmoe::SendBuffer> s;
  std::vector<mxmoe::RecvBuffer> r;
  for (size_t i = 0; i < num_sends; ++i)
    s.push_back({sends[i].peer, static_cast<const std::byte*>(sends[i].data), sends[i].bytes});
  for (size_t i = 0; i < num_recvs; ++i)
    r.push_back({recvs[i].peer, static_cast<std::byte*>(recvs[i].data), recvs[i].bytes});
  try {
    comm->exchange(s, r);
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
}

// 1, 2 and 3 ranks (threads) through mxmoe_ep_layer_*: every token's output has the bits of
// the one-process C layer, with the tokens on rank 0 or spread over every rank.
TEST(CApi, ExpertParallelLayerThroughAHostTransport) {
  mxmoe_checkpoint* c = open_checkpoint();
  const mxmoe_request_params p = reference_f32();
  mxmoe_layer* whole = nullptr;
  ASSERT_EQ(mxmoe_layer_create(c, 1, &p, &whole), MXMOE_OK) << mxmoe_last_error();
  constexpr int kTokens = 7, kHidden = 64;
  const std::vector<float> x = random_x(kTokens, kHidden, 4);
  std::vector<float> want(x.size());
  ASSERT_EQ(mxmoe_layer_forward_f32(whole, x.data(), kTokens, want.data()), MXMOE_OK);
  mxmoe_layer_destroy(whole);

  for (int n : {1, 2, 3}) {
    for (bool everywhere : {false, true}) {
      SCOPED_TRACE(std::to_string(n) + " ranks, tokens on " +
                   (everywhere ? "every rank" : "rank 0"));
      auto group = mxmoe::make_thread_group(n, {/*deadline_s=*/20});
      std::vector<float> y(x.size(), -1.0f);
      std::vector<std::string> errors(static_cast<std::size_t>(n));
      std::vector<mxmoe_layer_info> infos(static_cast<std::size_t>(n), mxmoe_layer_info_default());
      std::vector<std::thread> ranks;
      for (int r = 0; r < n; ++r)
        ranks.emplace_back([&, r] {
          const auto i = static_cast<std::size_t>(r);
          const mxmoe_communicator comm = communicator(r, n, exchange_through, group[i].get());
          mxmoe_ep_layer* layer = nullptr;
          if (mxmoe_ep_layer_create(c, 1, &p, &comm, &layer) != MXMOE_OK) {
            errors[i] = mxmoe_last_error();
            return;
          }
          mxmoe_ep_layer_get_info(layer, &infos[i]);
          // Rank r's tokens: [begin, end) of x.
          const int begin = everywhere ? kTokens * r / n : 0;
          const int end = everywhere ? kTokens * (r + 1) / n : (r == 0 ? kTokens : 0);
          const auto offset = static_cast<std::size_t>(begin * kHidden);
          if (mxmoe_ep_layer_forward_f32(layer, x.data() + offset, end - begin,
                                         y.data() + offset) != MXMOE_OK)
            errors[i] = mxmoe_last_error();
          mxmoe_ep_layer_destroy(layer);
        });
      for (std::thread& t : ranks) t.join();
      for (const std::string& e : errors) EXPECT_EQ(e, "");
      EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0);
      // Contiguous ranges covering the 8 experts once.
      int next = 0;
      for (const mxmoe_layer_info& info : infos) {
        EXPECT_EQ(info.expert_begin, next);
        next = info.expert_end;
      }
      EXPECT_EQ(next, 8);
    }
  }
  mxmoe_checkpoint_close(c);
}

int failing_exchange(void*, const mxmoe_message*, size_t, const mxmoe_message*, size_t, char* error,
                     size_t error_size) {
  std::snprintf(error, error_size, "peer 1 went away");
  return 7;
}

TEST(CApi, ExpertParallelFailuresAreStatuses) {
  mxmoe_checkpoint* c = open_checkpoint();
  const mxmoe_request_params p = reference_f32();
  mxmoe_ep_layer* layer = nullptr;
  const mxmoe_communicator outside = communicator(2, 2, failing_exchange, nullptr);
  EXPECT_EQ(mxmoe_ep_layer_create(c, 1, &p, &outside, &layer), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("communicator.rank must be in [0, size)"));
  const mxmoe_communicator no_callback = communicator(0, 2, nullptr, nullptr);
  EXPECT_EQ(mxmoe_ep_layer_create(c, 1, &p, &no_callback, &layer), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mxmoe_ep_layer_create(c, 1, &p, nullptr, &layer), MXMOE_ERROR_INVALID_ARGUMENT);
  // The host's transport fails while the group agrees: an I/O status with its reason.
  const mxmoe_communicator failing = communicator(0, 2, failing_exchange, nullptr);
  EXPECT_EQ(mxmoe_ep_layer_create(c, 1, &p, &failing, &layer), MXMOE_ERROR_IO);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("exchange callback failed (7): peer 1 went away"));
  EXPECT_EQ(layer, nullptr);
  mxmoe_checkpoint_close(c);
}

// ---- One contract at the edges (docs/RELIABILITY.md): the arrays of every forward call.

// A layer of the test checkpoint, and x of kEdgeTokens tokens with a NaN in token 2.
constexpr int kEdgeTokens = 4;
mxmoe_layer* edge_layer() {
  mxmoe_checkpoint* c = open_checkpoint();
  const mxmoe_request_params p = reference_f32();
  mxmoe_layer* layer = nullptr;
  EXPECT_EQ(mxmoe_layer_create(c, 1, &p, &layer), MXMOE_OK) << mxmoe_last_error();
  mxmoe_checkpoint_close(c);
  return layer;
}

// A one-rank expert-parallel group through the host-transport callback.
struct OneRankGroup {
  std::vector<std::unique_ptr<mxmoe::Communicator>> group = mxmoe::make_thread_group(1, {20});
  mxmoe_ep_layer* layer = nullptr;
  OneRankGroup() {
    mxmoe_checkpoint* c = open_checkpoint();
    const mxmoe_request_params p = reference_f32();
    const mxmoe_communicator comm = communicator(0, 1, exchange_through, group[0].get());
    EXPECT_EQ(mxmoe_ep_layer_create(c, 1, &p, &comm, &layer), MXMOE_OK) << mxmoe_last_error();
    mxmoe_checkpoint_close(c);
  }
  ~OneRankGroup() { mxmoe_ep_layer_destroy(layer); }
};

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = mxmoe::f32_to_bf16(x[i]);
  return out;
}

TEST(CApiEdges, NonFiniteInputIsRefusedByEveryForwardNamingTheToken) {
  mxmoe_layer* layer = edge_layer();
  OneRankGroup ep;
  std::vector<float> x = random_x(kEdgeTokens, 64, 3);
  x[2 * 64 + 5] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<uint16_t> xb = to_bf16(x);
  std::vector<float> y(x.size());
  std::vector<uint16_t> yb(x.size());
  const std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<float> w(8, 0.5f);
  const auto refused = [](mxmoe_status status) {
    EXPECT_EQ(status, MXMOE_ERROR_INVALID_ARGUMENT);
    EXPECT_THAT(mxmoe_last_error(),
                HasSubstr("x: 1 non-finite value (NaN/Inf) in 1 of 4 tokens: token 2 (1)"));
  };
  refused(mxmoe_layer_forward_f32(layer, x.data(), kEdgeTokens, y.data()));
  refused(mxmoe_layer_forward_tokens_f32(layer, x.data(), nullptr, kEdgeTokens, y.data()));
  refused(mxmoe_layer_forward_bf16(layer, xb.data(), kEdgeTokens, yb.data()));
  refused(
      mxmoe_layer_forward_routed_f32(layer, x.data(), ids.data(), w.data(), kEdgeTokens, y.data()));
  refused(mxmoe_layer_forward_routed_bf16(layer, xb.data(), ids.data(), w.data(), kEdgeTokens,
                                          yb.data()));
  refused(mxmoe_ep_layer_forward_f32(ep.layer, x.data(), kEdgeTokens, y.data()));
  mxmoe_layer_destroy(layer);
}

TEST(CApiEdges, RoutedIdsOutOfRangeAndBadWeightsAreRefused) {
  mxmoe_layer* layer = edge_layer();
  const std::vector<float> x = random_x(kEdgeTokens, 64, 4);
  std::vector<float> y(x.size());
  const std::vector<int32_t> good_ids = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<float> good_w(8, 0.5f);
  const auto refused = [&](std::vector<int32_t> ids, std::vector<float> w, const char* why) {
    EXPECT_EQ(mxmoe_layer_forward_routed_f32(layer, x.data(), ids.data(), w.data(), kEdgeTokens,
                                             y.data()),
              MXMOE_ERROR_INVALID_ARGUMENT);
    EXPECT_THAT(mxmoe_last_error(), HasSubstr(why));
  };
  std::vector<int32_t> ids = good_ids;
  ids[5] = 8;
  refused(ids, good_w, "expert id 8 of token 2, slot 1 is out of range [0, 8)");
  ids[5] = -1;
  refused(ids, good_w, "expert id -1 of token 2, slot 1");
  std::vector<float> w = good_w;
  w[3] = -0.25f;
  refused(good_ids, w, "of token 1, slot 1 is negative");
  w[3] = std::numeric_limits<float>::infinity();
  refused(good_ids, w, "of token 1, slot 1 is not finite");
  EXPECT_EQ(mxmoe_layer_forward_routed_f32(layer, x.data(), good_ids.data(), good_w.data(),
                                           kEdgeTokens, y.data()),
            MXMOE_OK)
      << mxmoe_last_error();
  mxmoe_layer_destroy(layer);
}

TEST(CApiEdges, NonFiniteOutputIsAStatusNamingTheTokens) {
  EXPECT_EQ(static_cast<int>(MXMOE_ERROR_NON_FINITE), 6);
  mxmoe_layer* layer = edge_layer();
  const std::vector<float> x = random_x(kEdgeTokens, 64, 5);
  std::vector<float> y(x.size());
  std::vector<uint16_t> yb(x.size());
  const std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 6, 7};
  // Legal routing weights near the float range: the weighted sum overflows in token 3 only.
  std::vector<float> w(8, 0.5f);
  w[6] = w[7] = 3e38f;
  EXPECT_EQ(
      mxmoe_layer_forward_routed_f32(layer, x.data(), ids.data(), w.data(), kEdgeTokens, y.data()),
      MXMOE_ERROR_NON_FINITE);
  EXPECT_THAT(mxmoe_last_error(), StartsWith("the output holds "));
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("(NaN/Inf) in 1 of 4 tokens: token 3 ("));
  const std::vector<uint16_t> xb = to_bf16(x);
  EXPECT_EQ(mxmoe_layer_forward_routed_bf16(layer, xb.data(), ids.data(), w.data(), kEdgeTokens,
                                            yb.data()),
            MXMOE_ERROR_NON_FINITE);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("in 1 of 4 tokens: token 3 ("));
  mxmoe_layer_destroy(layer);
}

TEST(CApiEdges, AnOutputOverlappingAnyInputIsRefused) {
  mxmoe_layer* layer = edge_layer();
  const std::vector<float> x = random_x(kEdgeTokens, 64, 6);
  const std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<float> w(8, 0.5f);
  // y's buffer holds the routing weights, then the ids, then (shifted) x.
  std::vector<float> buffer(x.size() + 64);
  float* y = buffer.data();
  const auto refused = [](mxmoe_status status, const char* what) {
    EXPECT_EQ(status, MXMOE_ERROR_INVALID_ARGUMENT);
    EXPECT_THAT(mxmoe_last_error(), HasSubstr(what));
  };
  std::memcpy(y + 8, w.data(), 8 * sizeof(float));
  refused(mxmoe_layer_forward_routed_f32(layer, x.data(), ids.data(), y + 8, kEdgeTokens, y),
          "y: overlaps topk_weights");
  std::memcpy(y + 100, ids.data(), 8 * sizeof(int32_t));
  refused(mxmoe_layer_forward_routed_f32(layer, x.data(), reinterpret_cast<const int32_t*>(y + 100),
                                         w.data(), kEdgeTokens, y),
          "y: overlaps topk_ids");
  std::memcpy(y + 64, x.data(), x.size() * sizeof(float));
  refused(mxmoe_layer_forward_f32(layer, y + 64, kEdgeTokens, y), "y: overlaps x");
  refused(mxmoe_layer_forward_routed_f32(layer, y + 64, ids.data(), w.data(), kEdgeTokens, y),
          "y: overlaps x");
  const std::vector<int32_t> token_ids(kEdgeTokens, 1);
  std::memcpy(y + 200, token_ids.data(), token_ids.size() * sizeof(int32_t));
  refused(mxmoe_layer_forward_tokens_f32(layer, x.data(), reinterpret_cast<const int32_t*>(y + 200),
                                         kEdgeTokens, y),
          "y: overlaps token_ids");
  mxmoe_layer_destroy(layer);
}

TEST(CApiEdges, TokensBeyondTheBoundAreInvalidArgumentOnEveryForward) {
  mxmoe_layer* layer = edge_layer();
  OneRankGroup ep;
  std::vector<float> x(64), y(64);
  const int32_t ids[2] = {0, 1};
  const float w[2] = {0.5f, 0.5f};
  const int64_t huge = std::numeric_limits<int64_t>::max();
  const auto refused = [](mxmoe_status status) {
    EXPECT_EQ(status, MXMOE_ERROR_INVALID_ARGUMENT);
    EXPECT_THAT(mxmoe_last_error(), HasSubstr("tokens; a call carries 0..1073741823"));
  };
  refused(mxmoe_layer_forward_f32(layer, x.data(), huge, y.data()));
  refused(mxmoe_layer_forward_routed_f32(layer, x.data(), ids, w, huge, y.data()));
  refused(mxmoe_ep_layer_forward_f32(ep.layer, x.data(), huge, y.data()));
  refused(mxmoe_ep_layer_forward_tokens_f32(ep.layer, x.data(), nullptr, huge, y.data()));
  mxmoe_layer_destroy(layer);
}

// SIZE bytes at the very end of a readable page followed by a PROT_NONE page: a library that
// reads or writes past SIZE faults.
struct GuardedBytes {
  std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  unsigned char* base = static_cast<unsigned char*>(
      mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  explicit GuardedBytes(const void* bytes, std::size_t size) {
    EXPECT_NE(base, MAP_FAILED);
    EXPECT_EQ(mprotect(base + page, page, PROT_NONE), 0);
    std::memcpy(at(size), bytes, size);
  }
  ~GuardedBytes() { munmap(base, 2 * page); }
  unsigned char* at(std::size_t size) const { return base + page - size; }
};

TEST(CApiEdges, AnOlderCallersStructsAreReadAndWrittenOnlyWithinTheirSize) {
  // A header before tokens_hint, ep_size and ep_rank: those keep their defaults.
  mxmoe_request_params p = reference_f32();
  const std::size_t old_params = offsetof(mxmoe_request_params, tokens_hint);
  p.struct_size = old_params;
  const GuardedBytes params(&p, old_params);
  mxmoe_checkpoint* c = open_checkpoint();
  mxmoe_layer* layer = nullptr;
  ASSERT_EQ(mxmoe_layer_create(
                c, 1, reinterpret_cast<const mxmoe_request_params*>(params.at(old_params)), &layer),
            MXMOE_OK)
      << mxmoe_last_error();
  // A header before expert_begin and expert_end: get_info writes only what it has.
  mxmoe_layer_info info = mxmoe_layer_info_default();
  const std::size_t old_info = offsetof(mxmoe_layer_info, expert_begin);
  info.struct_size = old_info;
  const GuardedBytes info_bytes(&info, old_info);
  auto* old = reinterpret_cast<mxmoe_layer_info*>(info_bytes.at(old_info));
  ASSERT_EQ(mxmoe_layer_get_info(layer, old), MXMOE_OK) << mxmoe_last_error();
  EXPECT_EQ(old->hidden, 64);
  EXPECT_EQ(old->intermediate, 32);
  mxmoe_layer_destroy(layer);

  // No struct_size (a struct not from the defaults) is refused, naming the init function.
  mxmoe_request_params zero;
  std::memset(&zero, 0, sizeof zero);
  EXPECT_EQ(mxmoe_layer_create(c, 1, &zero, &layer), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("start from mxmoe_request_default_params()"));
  p = reference_f32();
  p.struct_size = offsetof(mxmoe_request_params, threads) + 2;
  EXPECT_EQ(mxmoe_layer_create(c, 1, &p, &layer), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("ends inside the field threads"));
  mxmoe_communicator comm = communicator(0, 1, exchange_through, nullptr);
  comm.struct_size = 0;
  mxmoe_ep_layer* ep = nullptr;
  p = reference_f32();
  EXPECT_EQ(mxmoe_ep_layer_create(c, 1, &p, &comm, &ep), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("start from mxmoe_communicator_default()"));
  mxmoe_layer_info no_size;
  std::memset(&no_size, 0, sizeof no_size);
  ASSERT_EQ(mxmoe_layer_create(c, 1, &p, &layer), MXMOE_OK);
  EXPECT_EQ(mxmoe_layer_get_info(layer, &no_size), MXMOE_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(mxmoe_last_error(), HasSubstr("start from mxmoe_layer_info_default()"));
  mxmoe_layer_destroy(layer);
  mxmoe_checkpoint_close(c);
}

}  // namespace
