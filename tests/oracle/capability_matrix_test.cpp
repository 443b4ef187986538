// The capability matrix is derived from check(), and docs/BACKENDS.md is its output.
#include "oracle/capability_matrix.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "stub_backend.hpp"

namespace mxmoe::testing {
namespace {

using ::testing::HasSubstr;

TEST(CapabilityMatrix, ReflectsEachBackendsOwnCheck) {
  BackendCapabilities caps;
  caps.isa = {"avx512f", "avx512_vnni"};
  caps.activations = {ActivationFormat::int8, ActivationFormat::mxfp8};
  caps.batch_invariant_activations = {ActivationFormat::int8};
  caps.activation_fns = {ActivationFn::silu_glu};
  caps.routing_methods = {RoutingMethod::softmax_topk, RoutingMethod::sigmoid_group_topk};
  caps.dim_multiple = 64;
  const StubBackend vnni("vnni", caps, 1.0);
  const StubBackend gone("gone", portable_caps(), 1.0,
                         {{ReasonCode::not_compiled, "left out of this build", "", "", ""}});
  const auto rows = capability_matrix(candidates(vnni, gone), Hardware{});
  ASSERT_EQ(rows.size(), 2u);
  const CapabilityRow& r = rows[0];
  EXPECT_EQ(r.backend, "vnni");
  EXPECT_EQ(r.isa, "avx512f avx512_vnni");
  EXPECT_EQ(r.formats, (std::vector<std::string>{"no", "no", "yes, invariant", "yes"}));
  EXPECT_EQ(r.activation_fns, "silu_glu");
  EXPECT_EQ(r.routing_methods, "softmax_topk, sigmoid_group_topk");
  EXPECT_EQ(r.alignment, "hidden multiple of 64, intermediate multiple of 64");
  EXPECT_EQ(r.notes, "-");
  EXPECT_EQ(rows[1].formats, (std::vector<std::string>{"no", "no", "no", "no"}));
  EXPECT_THAT(rows[1].notes, HasSubstr("always refused: not_compiled"));
  EXPECT_THAT(format_capability_markdown(rows), HasSubstr("| vnni | avx512f avx512_vnni | no |"));
}

TEST(CapabilityMatrix, DocsBackendsMdIsTheGeneratedTable) {
  const std::string path = std::string(MXMOE_SOURCE_DIR) + "/docs/BACKENDS.md";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string generated =
      format_capability_markdown(capability_matrix(registered_backends(), Hardware{}));
  EXPECT_EQ(text.str(), generated) << "docs/BACKENDS.md is stale. Regenerate it from the code:\n"
                                      "  build/mxmoe backends --markdown > docs/BACKENDS.md";
}

}  // namespace
}  // namespace mxmoe::testing
