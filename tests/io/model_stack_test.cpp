// mxmoe::Model: the MoE stack of a checkpoint on one Runtime, layers bound on first use.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "io_fixtures.hpp"
#include "mxmoe/model.hpp"
#include "test_runtime.hpp"

namespace mxmoe {
namespace {

using ::testing::HasSubstr;
using testing_io::Dims;
using testing_io::TempDir;

Request reference_f32() {
  Request r;
  r.activation = ActivationFormat::f32;
  r.forced_backend = "reference";
  return r;
}

Hardware test_hardware() {
  Hardware hw = probe_hardware();
  hw.logical_cpus = 2;
  return hw;
}

TEST(Model, BindsLayersOnFirstUseAndMatchesFloat64) {
  TempDir dir;
  Dims d;
  d.layers = 3;
  const auto layers = testing_io::write_gpt_oss_checkpoint(dir.path(), d, /*sharded=*/true);
  Model model(dir.path(), test_hardware(), mxmoe::testing::test_runtime(2),
              ModelOptions{reference_f32(), false});
  EXPECT_EQ(model.num_layers(), 3);
  EXPECT_EQ(model.moe_layers(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(model.skip_reason(2), "");
  EXPECT_EQ(model.bound_layers(), 0);  // nothing packed at open

  const std::vector<float> x = testing_io::random_input(5, d.hidden, 4);
  for (int n : {2, 0}) {
    MoeLayer& layer = model.layer(n);
    EXPECT_EQ(&layer, &model.layer(n));  // kept, not bound again
    std::vector<float> y(x.size());
    layer.forward(x.data(), 5, y.data());
    const std::vector<double> want =
        testing_io::gpt_oss_reference(d, layers[static_cast<std::size_t>(n)], x, 5);
    // f32 activations on the reference backend: only float32 accumulation differs.
    EXPECT_LT(testing_io::relative_l2(y, want), 2e-5) << "layer " << n;
  }
  EXPECT_EQ(model.bound_layers(), 2);

  // bind() gives a fresh layer with another request; same weights, same math.
  Request bf16 = reference_f32();
  bf16.activation = ActivationFormat::bf16;
  MoeLayer other = model.bind(0, bf16);
  EXPECT_EQ(*other.selection().deployment.request.activation, ActivationFormat::bf16);
  EXPECT_EQ(model.bound_layers(), 2);

  EXPECT_THROW(model.layer(3), LoadError);
  EXPECT_THROW(model.skip_reason(-1), LoadError);
}

TEST(Model, EagerBindsEveryMoeLayerAtOpen) {
  TempDir dir;
  const Dims d;
  testing_io::write_gpt_oss_checkpoint(dir.path(), d, /*sharded=*/false);
  const Model model(dir.path(), test_hardware(), mxmoe::testing::test_runtime(1),
                    ModelOptions{reference_f32(), true});
  EXPECT_EQ(model.bound_layers(), d.layers);
}

TEST(Model, DenseLayersAreListedWithTheirReason) {
  TempDir dir;
  Dims d;
  d.layers = 2;
  testing_io::write_gpt_oss_checkpoint(dir.path(), d, /*sharded=*/false);
  // The same tensors under a Qwen3-MoE config whose layer 0 is a dense MLP.
  testing_io::write_config(dir.path(), {{"model_type", "qwen3_moe"},
                                        {"num_experts", d.experts},
                                        {"num_experts_per_tok", d.top_k},
                                        {"hidden_size", d.hidden},
                                        {"moe_intermediate_size", d.intermediate},
                                        {"intermediate_size", 4 * d.hidden},
                                        {"num_hidden_layers", d.layers},
                                        {"norm_topk_prob", true},
                                        {"decoder_sparse_step", 1},
                                        {"mlp_only_layers", {0}},
                                        {"quantization_config", {{"quant_method", "mxfp4"}}}});
  Model model(dir.path(), test_hardware(), mxmoe::testing::test_runtime(1),
              ModelOptions{reference_f32(), false});
  EXPECT_EQ(model.moe_layers(), std::vector<int>{1});
  EXPECT_THAT(model.skip_reason(0), HasSubstr("mlp_only_layers"));
  EXPECT_THROW(model.layer(0), LoadError);
}

}  // namespace
}  // namespace mxmoe
