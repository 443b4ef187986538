// `mxmoe quantize` core: a BF16 Mixtral-style checkpoint written here -> MXFP4 checkpoint ->
// loads back with the recorded layout, its weights are within the MXFP4 rounding bound of
// the originals, and its layer matches a float64 evaluation of the dequantized weights.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "io/mapped_file.hpp"
#include "io/quantize_checkpoint.hpp"
#include "io_fixtures.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer.hpp"
#include "test_runtime.hpp"

namespace mxmoe {
namespace {

using ::testing::HasSubstr;
using testing_io::TempDir;

using testing_io::Bf16Expert;
using testing_io::Bf16Layer;
using testing_io::kE;
using testing_io::kH;
using testing_io::kI;
using testing_io::kK;
using testing_io::kLayers;
using testing_io::write_bf16_mixtral;

std::vector<std::uint8_t> tensor_bytes(const std::string& dir, const std::string& name) {
  const auto index =
      parse_safetensors_index(io::read_text_file(dir + "/model.safetensors.index.json"), "index");
  const SafetensorsFile f = SafetensorsFile::open(dir + "/" + index.weight_map.at(name));
  const auto data = f.data(*f.find(name));
  return {data.begin(), data.end()};
}

// float64 Mixtral layer: softmax over all E, top-k (ties: lower index), renormalise,
// silu(gate) * up with gate/up as halves, no biases.
std::vector<double> mixtral_reference(const std::vector<float>& router,
                                      const std::vector<std::vector<double>>& w1,
                                      const std::vector<std::vector<double>>& w2,
                                      const std::vector<float>& x, int tokens) {
  std::vector<double> y(static_cast<std::size_t>(tokens * kH), 0.0);
  for (int t = 0; t < tokens; ++t) {
    const float* xt = x.data() + t * kH;
    std::vector<std::pair<double, int>> p(kE);
    for (int e = 0; e < kE; ++e) {
      double s = 0;
      for (int h = 0; h < kH; ++h)
        s += static_cast<double>(router[static_cast<std::size_t>(e * kH + h)]) *
             static_cast<double>(xt[h]);
      p[static_cast<std::size_t>(e)] = {s, e};
    }
    std::stable_sort(p.begin(), p.end(), [](auto& a, auto& b) { return a.first > b.first; });
    double denom = 0;
    for (int j = 0; j < kK; ++j)
      denom += std::exp(p[static_cast<std::size_t>(j)].first - p[0].first);
    for (int j = 0; j < kK; ++j) {
      const int e = p[static_cast<std::size_t>(j)].second;
      const double weight = std::exp(p[static_cast<std::size_t>(j)].first - p[0].first) / denom;
      const auto& a1 = w1[static_cast<std::size_t>(e)];
      const auto& a2 = w2[static_cast<std::size_t>(e)];
      std::vector<double> act(kI);
      for (int i = 0; i < kI; ++i) {
        double g = 0, u = 0;
        for (int h = 0; h < kH; ++h) {
          const auto xh = static_cast<double>(xt[h]);
          g += a1[static_cast<std::size_t>(i * kH + h)] * xh;
          u += a1[static_cast<std::size_t>((kI + i) * kH + h)] * xh;
        }
        act[static_cast<std::size_t>(i)] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int h = 0; h < kH; ++h) {
        double s = 0;
        for (int i = 0; i < kI; ++i)
          s += a2[static_cast<std::size_t>(h * kI + i)] * act[static_cast<std::size_t>(i)];
        y[static_cast<std::size_t>(t * kH + h)] += weight * s;
      }
    }
  }
  return y;
}

TEST(Quantize, Bf16MixtralRoundTripLoadsAndMatchesFloat64) {
  TempDir in, out_parent;
  std::vector<std::vector<std::uint8_t>> keep;
  const auto layers = write_bf16_mixtral(in.path(), keep);
  EXPECT_THROW(Checkpoint::open(in.path()), LoadError);  // BF16: must be quantized first

  const std::string out = out_parent / "q";
  std::vector<std::string> progress;
  io::QuantizeOptions options;
  options.progress = [&](const std::string& line) { progress.push_back(line); };
  io::quantize_checkpoint(in.path(), out, options);
  EXPECT_EQ(progress.size(), static_cast<std::size_t>(kLayers));

  const Checkpoint c = Checkpoint::open(out);
  const LayerSpec spec = c.layer_spec(1);
  EXPECT_EQ(spec.family, Family::mixtral);
  EXPECT_EQ(spec.gate_up_layout, GateUpLayout::halves);
  EXPECT_FALSE(spec.expert_bias);

  for (int n = 0; n < kLayers; ++n) {
    const auto& l = layers[static_cast<std::size_t>(n)];
    const std::string p = "model.layers." + std::to_string(n) + ".mlp.experts.";
    const auto b1 = tensor_bytes(out, p + "gate_up_proj_blocks");
    const auto s1 = tensor_bytes(out, p + "gate_up_proj_scales");
    const auto b2 = tensor_bytes(out, p + "down_proj_blocks");
    const auto s2 = tensor_bytes(out, p + "down_proj_scales");
    std::vector<std::vector<double>> w1, w2;
    for (int e = 0; e < kE; ++e) {
      w1.push_back(testing_io::dequant(b1, s1, static_cast<std::size_t>(e), 2 * kI, kH));
      w2.push_back(testing_io::dequant(b2, s2, static_cast<std::size_t>(e), kH, kI));
      // Round-up scale rule: |x| <= 6 * 2^s, and E2M1 steps are at most 2 * 2^s apart, so
      // the rounding error is at most 2^s (the block's scale).
      const auto& ex = l.experts[static_cast<std::size_t>(e)];
      for (int r = 0; r < 2 * kI; ++r)
        for (int h = 0; h < kH; ++h) {
          const std::size_t row = static_cast<std::size_t>(e * 2 * kI + r);
          const double bound =
              std::ldexp(1.0, s1[row * kH / 32 + static_cast<std::size_t>(h / 32)] - 127);
          const double orig =
              static_cast<double>(r < kI ? ex.gate[static_cast<std::size_t>(r * kH + h)]
                                         : ex.up[static_cast<std::size_t>((r - kI) * kH + h)]);
          ASSERT_LE(std::abs(w1.back()[static_cast<std::size_t>(r * kH + h)] - orig), bound);
        }
    }
    Request request;
    request.activation = ActivationFormat::f32;
    request.forced_backend = "reference";
    request.threads = 1;
    const LayerWeights w = c.layer_weights(n);
    MoeLayer moe =
        make_layer(c.layer_spec(n), w, probe_hardware(), request, mxmoe::testing::test_runtime(2));
    const int tokens = 6;
    const auto x = testing_io::random_input(tokens, kH, 40u + static_cast<std::uint32_t>(n));
    std::vector<float> y(x.size());
    moe.forward(x.data(), tokens, y.data());
    // float32 accumulation over <= 96 terms against float64: see checkpoint_test.cpp.
    EXPECT_LT(testing_io::relative_l2(y, mixtral_reference(l.router, w1, w2, x, tokens)), 2e-5);
  }
}

TEST(Quantize, RefusesAnExistingOutputWithoutForce) {
  TempDir in, out;
  std::vector<std::vector<std::uint8_t>> keep;
  write_bf16_mixtral(in.path(), keep);
  EXPECT_THAT(
      [&] {
        try {
          io::quantize_checkpoint(in.path(), out.path(), {});
        } catch (const LoadError& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      HasSubstr("--force"));
  io::QuantizeOptions force;
  force.force = true;
  force.scale_rule = ScaleRule::floor;
  io::quantize_checkpoint(in.path(), out.path(), force);
  EXPECT_NO_THROW((void)Checkpoint::open(out.path()).layer_weights(0));
}

TEST(Quantize, RejectsNanInAWeight) {
  TempDir in, out;
  std::vector<std::vector<std::uint8_t>> keep;
  write_bf16_mixtral(in.path(), keep);
  // Rewrite with a NaN in layer 0 expert 2's up projection (bf16 0x7FC0).
  const SafetensorsFile f = SafetensorsFile::open(in / "model.safetensors");
  std::vector<std::vector<std::uint8_t>> copies;
  std::vector<TensorToWrite> tensors;
  copies.reserve(f.header().tensors.size());
  for (const auto& t : f.header().tensors) {
    const auto d = f.data(t);
    copies.emplace_back(d.begin(), d.end());
    if (t.name == "model.layers.0.mlp.experts.2.up_proj.weight") {
      copies.back()[2 * 9] = 0xC0;
      copies.back()[2 * 9 + 1] = 0x7F;
    }
    tensors.push_back({t.name, t.dtype, t.shape, copies.back()});
  }
  write_safetensors(in / "model2.safetensors", tensors);
  std::filesystem::rename(in / "model2.safetensors", in / "model.safetensors");
  io::QuantizeOptions force;
  force.force = true;
  try {
    io::quantize_checkpoint(in.path(), out.path(), force);
    FAIL() << "expected LoadError";
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("experts.2.up_proj.weight"));
    EXPECT_THAT(e.what(), HasSubstr("index 9"));
  }
}

// --- quantize is transactional: a temporary sibling directory renamed into place ---------

using testing_io::directory_snapshot;
using testing_io::temporaries_in;

struct QuantizeFixture : ::testing::Test {
  TempDir root;
  std::string in = root / "in", out = root / "out";
  std::vector<std::vector<std::uint8_t>> keep;
  std::map<std::string, std::string> previous;

  // OUT from a first conversion, plus a stray file a user left there.
  void SetUp() override {
    std::filesystem::create_directories(in);
    write_bf16_mixtral(in, keep, 3, 1);
    io::quantize_checkpoint(in, out, {});
    testing_io::write_bytes(out + "/model.safetensors", "stale");
    previous = directory_snapshot(out);
    ASSERT_EQ(previous.size(), 6u);  // 3 shards, index, config, the stray file
  }
};

// --force replaces the directory as a whole: no file of the old one survives (a stale
// model.safetensors beside new shards would win at load time and load silently).
TEST_F(QuantizeFixture, ForceReplacesTheWholeDirectory) {
  write_bf16_mixtral(in, keep, 2, 2);
  io::QuantizeOptions force;
  force.force = true;
  io::quantize_checkpoint(in, out, force);
  const auto now = directory_snapshot(out);
  EXPECT_EQ(now.count("model.safetensors"), 0u);
  EXPECT_EQ(now.size(), 4u);  // 2 shards, index, config
  EXPECT_EQ(Checkpoint::open(out).num_layers(), 2);
  EXPECT_EQ(temporaries_in(root.path()), 0);
}

TEST_F(QuantizeFixture, ExistingOutputIsRefusedWithoutForce) {
  try {
    io::quantize_checkpoint(in, out, {});
    FAIL();
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("--force"));
  }
  EXPECT_EQ(directory_snapshot(out), previous);
}

// A failure in the last layer (a NaN weight) after two layers were written: OUT is exactly
// as it was, and nothing is left beside it.
TEST_F(QuantizeFixture, FailureMidwayLeavesThePreviousOutputIntact) {
  write_bf16_mixtral(in, keep, 3, 2, /*nan_layer=*/2);
  io::QuantizeOptions force;
  force.force = true;
  int layers_done = 0;
  force.progress = [&](const std::string&) { ++layers_done; };
  EXPECT_THROW(io::quantize_checkpoint(in, out, force), LoadError);
  EXPECT_EQ(layers_done, 2);
  EXPECT_EQ(directory_snapshot(out), previous);
  EXPECT_EQ(temporaries_in(root.path()), 0);
}

// Cancelled (what SIGINT does in the CLI) after the first layer: the same.
TEST_F(QuantizeFixture, CancellationLeavesThePreviousOutputIntact) {
  write_bf16_mixtral(in, keep, 3, 2);
  io::QuantizeOptions force;
  force.force = true;
  int layers_done = 0;
  force.progress = [&](const std::string&) { ++layers_done; };
  force.cancelled = [&] { return layers_done >= 1; };
  EXPECT_THROW(io::quantize_checkpoint(in, out, force), io::QuantizeCancelled);
  EXPECT_EQ(layers_done, 1);
  EXPECT_EQ(directory_snapshot(out), previous);
  EXPECT_EQ(temporaries_in(root.path()), 0);
}

// Replacing a directory that holds the input would delete the input: refused.
TEST_F(QuantizeFixture, OutputContainingTheInputIsRefused) {
  const std::string nested_in = out + "/src";
  std::filesystem::create_directories(nested_in);
  write_bf16_mixtral(nested_in, keep, 1, 3);
  io::QuantizeOptions force;
  force.force = true;
  try {
    io::quantize_checkpoint(nested_in, out, force);
    FAIL();
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("contains the input"));
  }
  EXPECT_TRUE(std::filesystem::exists(nested_in + "/model.safetensors"));
}

}  // namespace
}  // namespace mxmoe
