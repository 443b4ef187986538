// `mxmoe quantize` core: a BF16 Mixtral-style checkpoint written here -> MXFP4 checkpoint ->
// loads back with the recorded layout, its weights are within the MXFP4 rounding bound of
// the originals, and its layer matches a float64 evaluation of the dequantized weights.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

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

constexpr int kE = 4, kK = 2, kH = 64, kI = 96, kLayers = 2;

struct Bf16Expert {
  std::vector<float> gate, up, down;  // [I,H], [I,H], [H,I], BF16-exact values
};
struct Bf16Layer {
  std::vector<float> router;  // [E,H] stored as F32
  std::vector<Bf16Expert> experts;
};

// Writes a Mixtral-style checkpoint (HF v5 names: mlp.gate, mlp.experts.{e}.*_proj).
std::vector<Bf16Layer> write_bf16_mixtral(const std::string& dir,
                                          std::vector<std::vector<std::uint8_t>>& keep) {
  std::mt19937 rng(21);
  std::vector<Bf16Layer> layers(kLayers);
  std::vector<TensorToWrite> tensors;
  keep.reserve(64);
  const auto add = [&](const std::string& name, StDtype dtype, std::vector<std::uint64_t> shape,
                       std::vector<std::uint8_t> bytes) {
    keep.push_back(std::move(bytes));
    tensors.push_back({name, dtype, std::move(shape), keep.back()});
  };
  for (int n = 0; n < kLayers; ++n) {
    auto& l = layers[static_cast<std::size_t>(n)];
    const std::string p = "model.layers." + std::to_string(n) + ".mlp.";
    l.router = testing_io::random_bf16_values(rng, kE * kH, 0.2f);
    std::vector<std::uint8_t> router_bytes(l.router.size() * 4);
    std::memcpy(router_bytes.data(), l.router.data(), router_bytes.size());
    add(p + "gate.weight", StDtype::F32, testing_io::u64s({kE, kH}), std::move(router_bytes));
    for (int e = 0; e < kE; ++e) {
      Bf16Expert x;
      x.gate = testing_io::random_bf16_values(rng, kI * kH, 0.05f);
      x.up = testing_io::random_bf16_values(rng, kI * kH, 0.05f);
      x.down = testing_io::random_bf16_values(rng, kH * kI, 0.05f);
      const std::string q = p + "experts." + std::to_string(e) + ".";
      add(q + "gate_proj.weight", StDtype::BF16, testing_io::u64s({kI, kH}),
          testing_io::bf16_bytes(x.gate));
      add(q + "up_proj.weight", StDtype::BF16, testing_io::u64s({kI, kH}),
          testing_io::bf16_bytes(x.up));
      add(q + "down_proj.weight", StDtype::BF16, testing_io::u64s({kH, kI}),
          testing_io::bf16_bytes(x.down));
      l.experts.push_back(std::move(x));
    }
  }
  write_safetensors(dir + "/model.safetensors", tensors);
  testing_io::write_config(dir, {{"model_type", "mixtral"},
                                 {"num_local_experts", kE},
                                 {"num_experts_per_tok", kK},
                                 {"hidden_size", kH},
                                 {"intermediate_size", kI},
                                 {"num_hidden_layers", kLayers},
                                 {"hidden_act", "silu"},
                                 {"torch_dtype", "bfloat16"}});
  return layers;
}

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

}  // namespace
}  // namespace mxmoe
