// The kernel instruction-set table (src/backends/kernel_isa.inc) as the backends read it.
#include "backends/kernel_isa.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "backends/registry.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/oracle.hpp"

namespace mxmoe {
namespace {

const std::vector<KernelIsa> kAllSets = {
#define MXMOE_KERNEL_ISA(SET, ARCH, FEATURES) KernelIsa::SET,
#include "backends/kernel_isa.inc"
#undef MXMOE_KERNEL_ISA
};

TEST(KernelIsa, EveryFeatureIsAKnownName) {
  const std::vector<std::string_view> known = isa_feature_names();
  for (KernelIsa set : kAllSets) {
    const auto features = kernel_isa_features(set);
    EXPECT_FALSE(features.empty()) << to_string(set);
    for (std::string_view f : features)
      EXPECT_NE(std::find(known.begin(), known.end(), f), known.end())
          << to_string(set) << " lists unknown feature " << f;
  }
}

TEST(KernelIsa, UnionKeepsFirstListedOrderWithoutRepeats) {
  const auto both = kernel_isa_features({KernelIsa::avx512_vnni, KernelIsa::amx_int8});
  const auto vnni = kernel_isa_features(KernelIsa::avx512_vnni);
  ASSERT_GE(both.size(), vnni.size());
  EXPECT_TRUE(std::equal(vnni.begin(), vnni.end(), both.begin()));
  for (std::string_view f : kernel_isa_features(KernelIsa::amx_int8))
    EXPECT_EQ(std::count(both.begin(), both.end(), f), 1) << f;
}

// Every feature of a set is of the set's architecture: a set cannot ask for a mix that no
// machine has.
TEST(KernelIsa, EachSetsFeaturesAreOfItsArchitecture) {
  for (KernelIsa set : kAllSets) {
    const std::string_view arch = kernel_isa_arch(set);
    EXPECT_TRUE(arch == kArchX86_64 || arch == kArchAarch64) << to_string(set) << ": " << arch;
    for (std::string_view f : kernel_isa_features(set))
      EXPECT_EQ(isa_feature_arch(f), arch) << to_string(set) << " lists " << f;
  }
}

// A build compiles exactly the sets of its target's architecture.
TEST(KernelIsa, ABuildCompilesEverySetOfItsArchitectureAndNoOther) {
#if defined(__x86_64__)
  const std::string_view target = kArchX86_64;
#elif defined(__aarch64__)
  const std::string_view target = kArchAarch64;
#else
  const std::string_view target = "";
#endif
  for (KernelIsa set : kAllSets)
    EXPECT_EQ(kernel_isa_compiled(set), kernel_isa_arch(set) == target) << to_string(set);
}

// A backend's check() requires every feature of the kernel sets it runs: on a probe with
// exactly one of them missing it is refused with unsupported_isa naming that feature.
TEST(KernelIsa, EachBackendRefusesAProbeMissingAnyFeatureItsKernelsUse) {
  for (const Backend* b : registered_backends()) {
    if (b->name() == "reference") continue;
    // A probe with every feature on.
    Hardware hw;
    hw.model = "test";
    hw.logical_cpus = 2;
    for (std::string_view f : isa_feature_names()) set_isa_feature(hw.isa, f, true);
    Deployment d;
    d.layer = LayerSpec{};
    d.layer.name = "t";
    d.layer.num_experts = 4;
    d.layer.top_k = 2;
    d.layer.hidden = 64;
    d.layer.intermediate = 64;
    d.hardware = hw;
    int features_required = 0;
    for (std::string_view f : isa_feature_names()) {
      Deployment capped = d;
      set_isa_feature(capped.hardware.isa, f, false);
      bool names_it = false;
      for (const Rejection& r : b->check(capped))
        names_it |= r.code == ReasonCode::unsupported_isa && r.required == f;
      features_required += names_it;
    }
    EXPECT_GT(features_required, 0) << b->name() << " requires no instruction set at all";
  }
}

}  // namespace
}  // namespace mxmoe
