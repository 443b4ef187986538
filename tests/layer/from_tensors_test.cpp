// A layer from tensors in the caller's memory (include/mxmoe/layer_from_tensors.hpp): in every
// layout (fused interleaved, fused halves, per expert) it gives the bits of the same weights
// loaded from a checkpoint, on every backend this machine runs; it matches a float64 evaluation
// written by the tests; a backend that packs never reads the caller's memory again; and every
// malformed input is a std::invalid_argument naming the tensor and the numbers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/registry.hpp"
#include "io/io_fixtures.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/generate.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/layer_from_tensors.hpp"
#include "mxmoe/oracle.hpp"
#include "test_platform.hpp"
#include "test_runtime.hpp"

namespace mxmoe {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing_io::Dims;
using testing_io::TempDir;

constexpr int kTokens = 7;

// One gpt-oss layer written by the io tests' own writer, and the same bytes as tensors.
struct GptOssFixture {
  TempDir dir;
  Dims d;
  testing_io::GptOssLayer layer;
  GptOssFixture() {
    d.layers = 1;
    layer = testing_io::write_gpt_oss_checkpoint(dir.path(), d, /*sharded=*/false, 31)[0];
  }
  std::int64_t e() const { return d.experts; }
  std::int64_t h() const { return d.hidden; }
  std::int64_t i() const { return d.intermediate; }
};

HostTensor u8(const std::vector<std::uint8_t>& v, std::vector<std::int64_t> shape) {
  return {v.data(), TensorDtype::u8, std::move(shape)};
}
HostTensor bf16(const std::vector<std::uint8_t>& bytes, std::vector<std::int64_t> shape) {
  return {bytes.data(), TensorDtype::bf16, std::move(shape)};
}

// The checkpoint's tensors as they lie: w13 interleaved, blocks as [E, 2I, H/2] bytes (the
// shape vLLM holds) and w2 as [E, H, I/32, 16] (the checkpoint's), both spellings at once.
LayerTensors fused_interleaved(const GptOssFixture& f, bool router = true) {
  const std::int64_t e = f.e(), h = f.h(), i = f.i();
  const testing_io::GptOssLayer& l = f.layer;
  LayerTensors t;
  t.w13_blocks = u8(l.w1_blocks, {e, 2 * i, h / 2});
  t.w13_scales = u8(l.w1_scales, {e, 2 * i, h / 32});
  t.w2_blocks = u8(l.w2_blocks, {e, h, i / 32, 16});
  t.w2_scales = u8(l.w2_scales, {e, h, i / 32});
  t.w13_bias = bf16(l.b1_bytes, {e, 2 * i});
  t.w2_bias = bf16(l.b2_bytes, {e, h});
  if (router) {
    t.router_weight = bf16(l.router_w_bytes, {e, h});
    t.router_bias = bf16(l.router_b_bytes, {e});
  }
  return t;
}

// Rows of [E, 2I, width] interleaved (gate 2j, up 2j+1) re-arranged into halves (gate j, up
// I + j), done here row by row.
std::vector<std::uint8_t> to_halves(const std::vector<std::uint8_t>& v, std::int64_t e,
                                    std::int64_t i, std::size_t width) {
  std::vector<std::uint8_t> out(v.size());
  for (std::int64_t x = 0; x < e; ++x)
    for (std::int64_t r = 0; r < 2 * i; ++r) {
      const std::int64_t to = r % 2 == 0 ? r / 2 : i + r / 2;
      std::memcpy(out.data() + static_cast<std::size_t>(x * 2 * i + to) * width,
                  v.data() + static_cast<std::size_t>(x * 2 * i + r) * width, width);
    }
  return out;
}

// One expert's rows [first, first + rows) of a [E, R, width] tensor.
std::vector<std::uint8_t> rows_of(const std::vector<std::uint8_t>& v, std::int64_t expert,
                                  std::int64_t per_expert, std::int64_t first, std::int64_t rows,
                                  std::size_t width) {
  const auto begin = v.begin() + static_cast<std::ptrdiff_t>(
                                     static_cast<std::size_t>(expert * per_expert + first) * width);
  return {begin, begin + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rows) * width)};
}

// The halves re-arrangement of the fixture, kept alive with the tensors pointing into it.
struct Halves {
  std::vector<std::uint8_t> blocks, scales, bias;
  Halves(const GptOssFixture& f)
      : blocks(to_halves(f.layer.w1_blocks, f.e(), f.i(), static_cast<std::size_t>(f.h() / 2))),
        scales(to_halves(f.layer.w1_scales, f.e(), f.i(), static_cast<std::size_t>(f.h() / 32))),
        bias(to_halves(f.layer.b1_bytes, f.e(), f.i(), 2)) {}
};

// The halves re-arrangement cut into per-expert w1 (gate), w3 (up) and w2 tensors.
struct PerExpert {
  std::vector<std::vector<std::uint8_t>> bytes;  // every tensor's own buffer
  PerExpertTensors tensors;
  PerExpert(const GptOssFixture& f, const Halves& halves) {
    const std::int64_t e = f.e(), h = f.h(), i = f.i();
    bytes.reserve(static_cast<std::size_t>(6 * e));
    const auto add = [&](std::vector<HostTensor>& list, std::vector<std::uint8_t> v,
                         std::vector<std::int64_t> shape) {
      bytes.push_back(std::move(v));
      list.push_back(u8(bytes.back(), std::move(shape)));
    };
    const auto hb = static_cast<std::size_t>(h / 2), hs = static_cast<std::size_t>(h / 32);
    const auto ib = static_cast<std::size_t>(i / 2), is = static_cast<std::size_t>(i / 32);
    for (std::int64_t x = 0; x < e; ++x) {
      add(tensors.w1_blocks, rows_of(halves.blocks, x, 2 * i, 0, i, hb), {i, h / 32, 16});
      add(tensors.w1_scales, rows_of(halves.scales, x, 2 * i, 0, i, hs), {i, h / 32});
      add(tensors.w3_blocks, rows_of(halves.blocks, x, 2 * i, i, i, hb), {i, h / 2});
      add(tensors.w3_scales, rows_of(halves.scales, x, 2 * i, i, i, hs), {i, h / 32});
      add(tensors.w2_blocks, rows_of(f.layer.w2_blocks, x, h, 0, h, ib), {h, i / 2});
      add(tensors.w2_scales, rows_of(f.layer.w2_scales, x, h, 0, h, is), {h, i / 32});
    }
  }
};

LayerSpec gpt_oss_math(int top_k, MathOverrides o = {}) {
  LayerSpec s = family_math(Family::gpt_oss, o);
  s.top_k = top_k;
  return s;
}

// Every (backend, activation format) this machine runs the layer with.
std::vector<Request> requests_for(const LayerSpec& spec) {
  std::vector<Request> out;
  for (const Backend* b : registered_backends())
    for (const ActivationFormat f : {ActivationFormat::f32, ActivationFormat::bf16,
                                     ActivationFormat::int8, ActivationFormat::mxfp8}) {
      Request r;
      r.forced_backend = std::string(b->name());
      r.activation = f;
      r.threads = 2;
      const Selection s =
          judge(Deployment{spec, probe_hardware(), r}, preferences_for(spec.family));
      if (!s.chosen.empty()) out.push_back(r);
    }
  return out;
}

std::string name_of(const Request& r) {
  return r.forced_backend + " " + std::string(to_string(*r.activation));
}

struct Outputs {
  std::vector<float> routed, routed_self;  // routing given, and by its router when it has one
};

Outputs run(const LayerSpec& spec, const LayerWeights& w, const Request& r,
            const std::vector<float>& x, const std::vector<std::int32_t>& ids,
            const std::vector<float>& weights) {
  MoeLayer layer = make_layer(spec, w, probe_hardware(), r, mxmoe::testing::test_runtime(2));
  Outputs o;
  o.routed.assign(x.size(), 0.0f);
  layer.forward({.tokens = kTokens,
                 .x = x.data(),
                 .y = o.routed.data(),
                 .expert_ids = ids.data(),
                 .expert_weights = weights.data()});
  if (!w.router_weight.empty()) {
    o.routed_self.assign(x.size(), 0.0f);
    layer.forward({.tokens = kTokens, .x = x.data(), .y = o.routed_self.data()});
  }
  return o;
}

// Distinct experts per token and weights summing to 1 (an engine's routing).
void random_routing(int experts, int top_k, std::uint32_t seed, std::vector<std::int32_t>& ids,
                    std::vector<float>& weights) {
  std::mt19937 rng(seed);
  ids.clear();
  weights.clear();
  for (int t = 0; t < kTokens; ++t) {
    std::vector<std::int32_t> order(static_cast<std::size_t>(experts));
    for (int e = 0; e < experts; ++e) order[static_cast<std::size_t>(e)] = e;
    std::shuffle(order.begin(), order.end(), rng);
    float sum = 0;
    std::vector<float> w(static_cast<std::size_t>(top_k));
    for (float& v : w) sum += v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng);
    for (int j = 0; j < top_k; ++j) {
      ids.push_back(order[static_cast<std::size_t>(j)]);
      weights.push_back(w[static_cast<std::size_t>(j)] / sum);
    }
  }
}

TEST(LayerFromTensors, EveryLayoutGivesTheCheckpointsBitsOnEveryBackend) {
  const GptOssFixture f;
  const Checkpoint c = Checkpoint::open(f.dir.path());
  const LayerSpec ckpt_spec = c.layer_spec(0);
  const LayerWeights ckpt = c.layer_weights(0);
  const Halves halves(f);
  const PerExpert per_expert(f, halves);
  const std::int64_t e = f.e(), h = f.h(), i = f.i();

  const TensorLayer interleaved = layer_from_tensors(gpt_oss_math(f.d.top_k), fused_interleaved(f));
  LayerTensors t = fused_interleaved(f);
  t.w13_blocks = u8(halves.blocks, {e, 2 * i, h / 32, 16});
  t.w13_scales = u8(halves.scales, {e, 2 * i, h / 32});
  t.w13_bias = bf16(halves.bias, {e, 2 * i});
  const TensorLayer fused_halves =
      layer_from_tensors(gpt_oss_math(f.d.top_k, {.gate_up = GateUpLayout::halves}), t);
  t = fused_interleaved(f);
  t.w13_blocks = t.w13_scales = t.w2_blocks = t.w2_scales = {};
  t.w13_bias = bf16(halves.bias, {e, 2 * i});
  t.per_expert = per_expert.tensors;
  const TensorLayer experts = layer_from_tensors(gpt_oss_math(f.d.top_k), t);

  // The spec is the checkpoint's, but for its name and the layout of W1.
  for (const TensorLayer* l : {&interleaved, &fused_halves, &experts}) {
    LayerSpec s = l->spec;
    s.name = ckpt_spec.name;
    s.gate_up_layout = ckpt_spec.gate_up_layout;
    EXPECT_EQ(s, ckpt_spec);
  }
  EXPECT_EQ(interleaved.spec.gate_up_layout, GateUpLayout::interleaved);
  EXPECT_EQ(fused_halves.spec.gate_up_layout, GateUpLayout::halves);
  EXPECT_EQ(experts.spec.gate_up_layout, GateUpLayout::halves);
  // Views on the caller's bytes: nothing was copied.
  EXPECT_EQ(interleaved.weights.w1.row_blocks(0, 0), f.layer.w1_blocks.data());
  EXPECT_EQ(experts.weights.w1.row_blocks(2, i), per_expert.tensors.w3_blocks[2].data);

  const std::vector<float> x = testing_io::random_input(kTokens, f.d.hidden, 5);
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  random_routing(f.d.experts, f.d.top_k, 6, ids, weights);
  const std::vector<Request> requests = requests_for(ckpt_spec);
  ASSERT_FALSE(requests.empty());
  for (const Request& r : requests) {
    SCOPED_TRACE(name_of(r));
    const Outputs want = run(ckpt_spec, ckpt, r, x, ids, weights);
    for (const TensorLayer* l : {&interleaved, &fused_halves, &experts}) {
      SCOPED_TRACE(std::string(to_string(l->spec.gate_up_layout)) +
                   (l == &experts ? ", per expert" : ", fused"));
      const Outputs got = run(l->spec, l->weights, r, x, ids, weights);
      EXPECT_EQ(got.routed, want.routed);
      EXPECT_EQ(got.routed_self, want.routed_self);
    }
  }
}

TEST(LayerFromTensors, MatchesAFloat64Evaluation) {
  const GptOssFixture f;
  const TensorLayer l = layer_from_tensors(gpt_oss_math(f.d.top_k), fused_interleaved(f));
  Request r;
  r.activation = ActivationFormat::f32;
  r.forced_backend = "reference";
  r.threads = 2;
  MoeLayer layer =
      make_layer(l.spec, l.weights, probe_hardware(), r, mxmoe::testing::test_runtime(2));
  const std::vector<float> x = testing_io::random_input(kTokens, f.d.hidden, 8);
  std::vector<float> y(x.size());
  layer.forward({.tokens = kTokens, .x = x.data(), .y = y.data()});
  // The io tests' own float64 layer: its own E2M1 table, routing and swiglu (f32 accumulation
  // is the only difference: relative L2 ~ sqrt(K) 2^-24).
  EXPECT_LT(testing_io::relative_l2(y, testing_io::gpt_oss_reference(f.d, f.layer, x, kTokens)),
            1e-5);
}

TEST(LayerFromTensors, AQwen3LayerInHalvesGivesTheCheckpointsBits) {
  TempDir dir;
  const LayerSpec spec = resize(preset("qwen3-30b-a3b"), {8, 2, 64, 96});
  GenerateOptions options;
  options.seed = 17;
  generate_checkpoint(dir.path() + "/qwen", spec, options);
  const Checkpoint c = Checkpoint::open(dir.path() + "/qwen");
  const LayerWeights w = c.layer_weights(0);
  ASSERT_EQ(c.layer_spec(0).gate_up_layout, GateUpLayout::halves);
  const std::int64_t e = 8, h = 64, i = 96;
  // The checkpoint's own bytes (one contiguous tensor each), handed over as tensors.
  LayerTensors t;
  t.w13_blocks = {w.w1.segment(0, 0).blocks, TensorDtype::u8, {e, 2 * i, h / 2}};
  t.w13_scales = {w.w1.segment(0, 0).scales, TensorDtype::u8, {e, 2 * i, h / 32}};
  t.w2_blocks = {w.w2.segment(0, 0).blocks, TensorDtype::u8, {e, h, i / 2}};
  t.w2_scales = {w.w2.segment(0, 0).scales, TensorDtype::u8, {e, h, i / 32}};
  t.router_weight = {
      w.router_weight.data,
      w.router_weight.dtype == ElementType::f32 ? TensorDtype::f32 : TensorDtype::bf16,
      {e, h}};
  LayerSpec math = family_math(Family::qwen3_moe);
  math.top_k = 2;
  const TensorLayer l = layer_from_tensors(math, t);
  const std::vector<float> x = testing_io::random_input(kTokens, 64, 9);
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  random_routing(8, 2, 10, ids, weights);
  for (const Request& r : requests_for(c.layer_spec(0))) {
    SCOPED_TRACE(name_of(r));
    const Outputs want = run(c.layer_spec(0), w, r, x, ids, weights);
    const Outputs got = run(l.spec, l.weights, r, x, ids, weights);
    EXPECT_EQ(got.routed, want.routed);
    EXPECT_EQ(got.routed_self, want.routed_self);
  }
}

// The caller's bytes, owned by the test so that it can overwrite them after binding.
struct OwnedTensors {
  std::vector<std::uint8_t> w13_blocks, w13_scales, w2_blocks, w2_scales, b1, b2, router;
  explicit OwnedTensors(const GptOssFixture& f)
      : w13_blocks(f.layer.w1_blocks),
        w13_scales(f.layer.w1_scales),
        w2_blocks(f.layer.w2_blocks),
        w2_scales(f.layer.w2_scales),
        b1(f.layer.b1_bytes),
        b2(f.layer.b2_bytes),
        router(f.layer.router_w_bytes) {}
  LayerTensors tensors(const GptOssFixture& f) const {
    const std::int64_t e = f.e(), h = f.h(), i = f.i();
    LayerTensors t;
    t.w13_blocks = u8(w13_blocks, {e, 2 * i, h / 2});
    t.w13_scales = u8(w13_scales, {e, 2 * i, h / 32});
    t.w2_blocks = u8(w2_blocks, {e, h, i / 2});
    t.w2_scales = u8(w2_scales, {e, h, i / 32});
    t.w13_bias = bf16(b1, {e, 2 * i});
    t.w2_bias = bf16(b2, {e, h});
    return t;
  }
  void scribble() {  // every byte changed: NaN scales and biases, other codes
    for (auto* v : {&w13_blocks, &w2_blocks}) std::fill(v->begin(), v->end(), 0x77);
    for (auto* v : {&w13_scales, &w2_scales, &b1, &b2}) std::fill(v->begin(), v->end(), 0xFF);
  }
};

TEST(LayerFromTensors, APackingBackendNeverReadsTheCallersMemoryAgain) {
  MXMOE_REQUIRE_X86_BACKENDS();
  const GptOssFixture f;
  const std::vector<float> x = testing_io::random_input(kTokens, f.d.hidden, 12);
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  random_routing(f.d.experts, f.d.top_k, 13, ids, weights);
  int packing = 0;
  const LayerSpec spec = layer_from_tensors(gpt_oss_math(f.d.top_k), fused_interleaved(f)).spec;
  for (const Request& r : requests_for(spec)) {
    SCOPED_TRACE(name_of(r));
    OwnedTensors owned(f);
    const TensorLayer l = layer_from_tensors(gpt_oss_math(f.d.top_k), owned.tensors(f));
    MoeLayer layer =
        make_layer(l.spec, l.weights, probe_hardware(), r, mxmoe::testing::test_runtime(2));
    std::vector<float> before(x.size()), after(x.size());
    layer.forward({.tokens = kTokens,
                   .x = x.data(),
                   .y = before.data(),
                   .expert_ids = ids.data(),
                   .expert_weights = weights.data()});
    owned.scribble();
    layer.forward({.tokens = kTokens,
                   .x = x.data(),
                   .y = after.data(),
                   .expert_ids = ids.data(),
                   .expert_weights = weights.data()});
    EXPECT_EQ(layer.reads_weight_views(), layer.packed_weight_bytes() == 0);
    if (layer.reads_weight_views()) {
      // The reference computes from the caller's bytes, in place: they changed, so did y.
      EXPECT_NE(after, before);
    } else {
      ++packing;
      EXPECT_EQ(after, before);
    }
  }
  EXPECT_GT(packing, 0) << "no backend that packs runs here";
}

TEST(LayerFromTensors, WithoutARouterOnlyForwardRoutedRuns) {
  const GptOssFixture f;
  const TensorLayer l =
      layer_from_tensors(gpt_oss_math(f.d.top_k), fused_interleaved(f, /*router=*/false));
  EXPECT_TRUE(l.weights.router_weight.empty());
  EXPECT_FALSE(l.spec.router_bias);
  Request r;
  r.forced_backend = "reference";
  MoeLayer layer =
      make_layer(l.spec, l.weights, probe_hardware(), r, mxmoe::testing::test_runtime(1));
  const std::vector<float> x = testing_io::random_input(kTokens, f.d.hidden, 3);
  std::vector<float> y(x.size(), 0.0f);
  try {
    layer.forward({.tokens = kTokens, .x = x.data(), .y = y.data()});
    ADD_FAILURE() << "forward ran without router weights";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("has no router weights"));
  }
  EXPECT_EQ(y, std::vector<float>(x.size(), 0.0f));  // nothing written
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  random_routing(f.d.experts, f.d.top_k, 4, ids, weights);
  layer.forward({.tokens = kTokens,
                 .x = x.data(),
                 .y = y.data(),
                 .expert_ids = ids.data(),
                 .expert_weights = weights.data()});
  for (const float v : y) ASSERT_TRUE(std::isfinite(v));
}

// ---- Hostile inputs: each a std::invalid_argument whose message names the problem.

std::string error_of(const LayerSpec& math, const LayerTensors& t) {
  try {
    (void)layer_from_tensors(math, t);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(LayerFromTensors, RefusesWhatACheckpointWouldNotHold) {
  GptOssFixture f;
  const std::int64_t e = f.e(), h = f.h(), i = f.i();
  const LayerSpec math = gpt_oss_math(f.d.top_k);
  const auto with = [&](const std::function<void(LayerTensors&)>& change) {
    LayerTensors t = fused_interleaved(f);
    change(t);
    return error_of(math, t);
  };
  // Shapes that disagree with one another: the tensor, its shape, the expected one and where
  // the sizes came from.
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.w13_scales.shape = {e, 2 * i, h / 16};
              }),
              AllOf(HasSubstr("w13_scales has shape [4, 192, 4], expected [4, 192, 2]"),
                    HasSubstr("E = 4, H = 64, I = 96 from w13_blocks [4, 192, 32]")));
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.w2_blocks.shape = {e - 1, h, i / 2};
              }),
              HasSubstr("w2_blocks has shape [3, 64, 48], expected [4, 64, 48] or [4, 64, 3, 16]"));
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.w2_blocks.shape = {e, 2 * h, i / 2};
              }),
              HasSubstr("w2_blocks has shape [4, 128, 48]"));
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.w2_scales.shape = {e, h, i / 64};
              }),
              HasSubstr("w2_scales has shape [4, 64, 1], expected [4, 64, 3]"));
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.w13_blocks.shape = {e, 2 * i - 1, h / 2};
              }),
              HasSubstr("its 191 rows are not 2I"));
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.w13_blocks.shape = {e, 2 * i, h / 32, 8};
              }),
              HasSubstr("w13_blocks has shape [4, 192, 2, 8], expected [E, 2I, H/2] or"));
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.w13_bias.shape = {e, i};
              }),
              HasSubstr("w13_bias has shape [4, 96], expected [4, 192]"));
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.router_bias.shape = {1, e};
              }),
              HasSubstr("router_bias has shape [1, 4], expected [4]"));
  // H not a multiple of 32 (and so no whole scale per row), the bounds of every spec.
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.w13_blocks.shape = {e, 2 * i, 24};
                t.w13_scales.shape = {e, 2 * i, 1};
              }),
              AllOf(HasSubstr("hidden = 48 must be a positive multiple of 32"),
                    HasSubstr("from w13_blocks [4, 192, 24]")));
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.w13_blocks.shape = {70000, 2 * i, h / 2};
              }),
              HasSubstr("num_experts = 70000 must be in [1, 65536]"));
  // Sizes that would overflow, or are not sizes: refused before any product is formed.
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.w13_blocks.shape = {e, 2 * i, std::int64_t{1} << 62};
              }),
              HasSubstr("w13_blocks has shape [4, 192, 4611686018427387904]: dimension 2 must "
                        "lie in [1, 524288]"));
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.w2_scales.shape = {e, -h, i / 32};
              }),
              HasSubstr("dimension 1 must lie in [1, 524288]"));
  // Element types.
  EXPECT_THAT(with([&](LayerTensors& t) { t.w2_blocks.dtype = TensorDtype::bf16; }),
              HasSubstr("w2_blocks has dtype bfloat16, expected uint8"));
  EXPECT_THAT(with([&](LayerTensors& t) { t.w2_bias.dtype = TensorDtype::u8; }),
              HasSubstr("w2_bias has dtype uint8, expected float32 or bfloat16"));
  // Missing pieces and null pointers.
  EXPECT_THAT(with([&](LayerTensors& t) { t.w2_scales.data = nullptr; }),
              HasSubstr("w2_scales is missing (the fused layout needs it)"));
  EXPECT_THAT(with([&](LayerTensors& t) { t.w13_bias = {}; }),
              HasSubstr("w13_bias is missing (the spec needs [4, 192])"));
  EXPECT_THAT(with([&](LayerTensors& t) { t.router_bias = {}; }),
              HasSubstr("router_bias is missing"));
  EXPECT_THAT(with([&](LayerTensors& t) { t.router_weight = {}; }),
              HasSubstr("router_bias is given without router_weight"));
  EXPECT_THAT(error_of(math, {}), HasSubstr("no expert weights"));
  EXPECT_THAT(with([&](LayerTensors& t) { t.per_expert.w1_blocks.push_back(t.w13_blocks); }),
              HasSubstr("pass one layout"));

  // Values, as the checkpoint loader refuses them: the E8M0 NaN scale, a non-finite bias or
  // router weight.
  std::vector<std::uint8_t>& scales = f.layer.w1_scales;
  const std::uint8_t kept = scales[static_cast<std::size_t>((1 * 2 * i + 5) * (h / 32) + 1)];
  scales[static_cast<std::size_t>((1 * 2 * i + 5) * (h / 32) + 1)] = kE8m0Nan;
  EXPECT_THAT(with([](LayerTensors&) {}),
              HasSubstr("w13_scales has the NaN scale 0xFF at expert 1, row 5, block 1"));
  scales[static_cast<std::size_t>((1 * 2 * i + 5) * (h / 32) + 1)] = kept;
  std::vector<float> b1(static_cast<std::size_t>(e * 2 * i), 0.25f);
  b1[static_cast<std::size_t>(2 * 2 * i + 17)] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.w13_bias = {b1.data(), TensorDtype::f32, {e, 2 * i}};
              }),
              HasSubstr("w13_bias holds NaN or Inf at row 2, column 17"));
  b1[static_cast<std::size_t>(2 * 2 * i + 17)] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.w13_bias = {b1.data(), TensorDtype::f32, {e, 2 * i}};
              }),
              HasSubstr("w13_bias holds NaN or Inf"));
  std::vector<std::uint16_t> router(static_cast<std::size_t>(e * h), 0x3F80);  // 1.0
  router[7] = 0x7FC0;                                                          // NaN
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.router_weight = {router.data(), TensorDtype::bf16, {e, h}};
              }),
              HasSubstr("router_weight holds NaN or Inf at row 0, column 7"));
  // A float32 tensor that is not aligned to its elements.
  std::vector<float> b2(static_cast<std::size_t>(e * h + 1), 0.0f);
  EXPECT_THAT(with([&](LayerTensors& t) {
                t.w2_bias = {
                    reinterpret_cast<const std::uint8_t*>(b2.data()) + 2, TensorDtype::f32, {e, h}};
              }),
              HasSubstr("w2_bias: its data at"));

  // top_k outside [1, E]; sizes the spec gives that the tensors contradict.
  for (const int k : {0, 5, -1}) {
    LayerSpec bad = math;
    bad.top_k = k;
    EXPECT_THAT(error_of(bad, fused_interleaved(f)),
                HasSubstr("top_k = " + std::to_string(k) + " must be in [1, num_experts = 4]"));
  }
  LayerSpec wrong = math;
  wrong.hidden = 128;
  EXPECT_THAT(error_of(wrong, fused_interleaved(f)),
              HasSubstr("the spec's hidden = 128 disagrees with the tensors (E = 4, H = 64"));
  // What is not built from tensors.
  LayerSpec hash = math;
  hash.routing = RoutingMethod::hash;
  EXPECT_THAT(error_of(hash, fused_interleaved(f)), HasSubstr("hash routing"));
  LayerSpec shared = math;
  shared.shared_experts = 1;
  EXPECT_THAT(error_of(shared, fused_interleaved(f)), HasSubstr("shared experts"));
}

TEST(LayerFromTensors, PerExpertTensorsAreCheckedOneByOne) {
  const GptOssFixture f;
  const Halves halves(f);
  const std::int64_t h = f.h(), i = f.i();
  const LayerSpec math = gpt_oss_math(f.d.top_k);
  const auto with = [&](const std::function<void(PerExpertTensors&)>& change) {
    const PerExpert p(f, halves);
    LayerTensors t = fused_interleaved(f);
    t.w13_blocks = t.w13_scales = t.w2_blocks = t.w2_scales = {};
    t.w13_bias = bf16(halves.bias, {f.e(), 2 * i});
    t.per_expert = p.tensors;
    change(t.per_expert);
    return error_of(math, t);
  };
  EXPECT_EQ(with([](PerExpertTensors&) {}), "(accepted)");
  EXPECT_THAT(with([](PerExpertTensors& p) { p.w3_scales.pop_back(); }),
              HasSubstr("w3_scales holds 3 tensors but w1_blocks holds 4 (one per expert)"));
  EXPECT_THAT(with([&](PerExpertTensors& p) {
                p.w3_blocks[2].shape = {i, h / 4};
              }),
              AllOf(HasSubstr("w3_blocks[2] has shape [96, 16], expected [96, 32] or [96, 2, 16]"),
                    HasSubstr("4 tensors in w1_blocks of shape [96, 2, 16]")));
  EXPECT_THAT(with([&](PerExpertTensors& p) {
                p.w2_scales[1].shape = {h, i / 16};
              }),
              HasSubstr("w2_scales[1] has shape [64, 6], expected [64, 3]"));
  EXPECT_THAT(with([](PerExpertTensors& p) { p.w1_scales[3].data = nullptr; }),
              HasSubstr("w1_scales[3] is missing (the per-expert layout needs it)"));
  // A NaN scale in expert 2's up rows: row I + 4 of W1.
  std::vector<std::uint8_t> up(
      halves.scales.begin() + static_cast<std::ptrdiff_t>((2 * 2 * i + i) * (h / 32)),
      halves.scales.begin() + static_cast<std::ptrdiff_t>((2 * 2 * i + 2 * i) * (h / 32)));
  up[static_cast<std::size_t>(4 * (h / 32))] = kE8m0Nan;
  EXPECT_THAT(with([&](PerExpertTensors& p) {
                p.w3_scales[2] = u8(up, {i, h / 32});
              }),
              AllOf(HasSubstr("w1_scales/w3_scales"),
                    HasSubstr("NaN scale 0xFF at expert 2, row 100, block 0")));
}

TEST(LayerFromTensors, FamilyMathIsThePresetsAndOverridesApplyWhereTheyMean) {
  const LayerSpec gpt = family_math(Family::gpt_oss);
  EXPECT_EQ(gpt.routing, RoutingMethod::topk_softmax);
  EXPECT_EQ(gpt.activation, ActivationFn::swiglu_oai);
  EXPECT_EQ(gpt.activation_params, (ActivationParams{1.702f, 7.0f}));
  EXPECT_TRUE(gpt.expert_bias && gpt.router_bias);
  EXPECT_EQ(gpt.gate_up_layout, GateUpLayout::interleaved);
  const LayerSpec v3 = family_math(Family::deepseek_v3);
  EXPECT_EQ(v3.routing, RoutingMethod::sigmoid_group_topk);
  EXPECT_TRUE(v3.routing_params.selection_bias);
  EXPECT_EQ(v3.routing_params.routed_scaling_factor, 2.5f);
  EXPECT_EQ(v3.routing_params.n_group, 1);
  EXPECT_EQ(v3.shared_experts, 0);
  EXPECT_EQ(v3.gate_up_layout, GateUpLayout::halves);
  const LayerSpec v4 = family_math(Family::deepseek_v4);
  EXPECT_EQ(v4.activation, ActivationFn::silu_glu_clamp);
  EXPECT_EQ(v4.activation_params.limit, 10.0f);
  EXPECT_EQ(v4.shared_weight_format, ElementType::mxfp4);
  for (const Family f : {Family::mixtral, Family::qwen3_moe}) {
    const LayerSpec s = family_math(f);
    EXPECT_EQ(s.routing, RoutingMethod::softmax_topk);
    EXPECT_EQ(s.activation, ActivationFn::silu_glu);
    EXPECT_FALSE(s.expert_bias);
  }
  EXPECT_EQ(family_math(Family::gpt_oss, {.alpha = 1.5f, .limit = 6.0f}).activation_params,
            (ActivationParams{1.5f, 6.0f}));
  EXPECT_EQ(
      family_math(Family::deepseek_v3, {.n_group = 8, .topk_group = 4}).routing_params.topk_group,
      4);
  const auto refused = [](Family f, const MathOverrides& o) {
    try {
      (void)family_math(f, o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_THAT(refused(Family::mixtral, {.alpha = 1.5f}),
              HasSubstr("alpha applies to the swiglu_oai activation only, not silu_glu"));
  EXPECT_THAT(refused(Family::qwen3_moe, {.limit = 5.0f}), HasSubstr("limit applies to"));
  EXPECT_THAT(refused(Family::gpt_oss, {.n_group = 2}),
              HasSubstr("n_group and topk_group apply to sigmoid_group_topk routing only"));
  EXPECT_EQ(refused(Family::deepseek_v4, {.limit = 5.0f}), "(accepted)");
}

}  // namespace
}  // namespace mxmoe
