// The probe on this machine, the ISA cap, and feature names.
#include <gtest/gtest.h>

#include <algorithm>

#include "mxmoe/hardware.hpp"

namespace mxmoe {
namespace {

TEST(Probe, ThisMachineReportsItsFeaturesAndSaneFacts) {
  const Hardware h = probe_hardware();
#if defined(__x86_64__)
  // The CI and development machines are x86-64 with AVX2 (Zen 4, Sapphire Rapids).
  EXPECT_TRUE(h.isa.avx2);
  EXPECT_TRUE(h.isa.fma);
  EXPECT_FALSE(h.vendor.empty());
  EXPECT_GT(h.l1d_bytes, 0u);
#else
  // Elsewhere (the aarch64 cross build under qemu-user) no x86 feature may be claimed, and
  // the cache sizes come from sysfs when it has them.
  EXPECT_EQ(h.isa, IsaFeatures{});
#endif
  EXPECT_GT(h.logical_cpus, 0);
  EXPECT_TRUE(h.cuda_devices.empty());  // no CUDA runtime in this build
  EXPECT_EQ(h.source, "probe");
  // A feature is never both usable and denied, and denied names are real features.
  for (const std::string& name : h.os_denied) {
    ASSERT_TRUE(isa_feature(h.isa, name).has_value()) << name;
    EXPECT_FALSE(*isa_feature(h.isa, name)) << name;
  }
  // Dependencies between features hold (the probe requires the base of each extension).
  EXPECT_TRUE(!h.isa.avx512_vnni || h.isa.avx512f);
  EXPECT_TRUE(!h.isa.amx_int8 || h.isa.amx_tile);
}

TEST(Probe, CapIsApplied) {
  const Hardware full = probe_hardware();
  const Hardware none = probe_hardware("none");
  EXPECT_EQ(none.isa, IsaFeatures{});
  EXPECT_EQ(none.isa_cap, "none");
  const Hardware avx2 = probe_hardware("avx2");
  EXPECT_EQ(avx2.isa.avx2, full.isa.avx2);
  EXPECT_FALSE(avx2.isa.avx512f);
  EXPECT_THROW((void)probe_hardware("sse9"), std::invalid_argument);
}

TEST(CapIsa, KeepsExactlyTheFeaturesOfEachLevel) {
  IsaFeatures all;
  for (std::string_view n : isa_feature_names()) ASSERT_TRUE(set_isa_feature(all, n, true));
  EXPECT_EQ(cap_isa(all, ""), all);
  EXPECT_EQ(cap_isa(all, "amx"), all);
  EXPECT_EQ(cap_isa(all, "none"), IsaFeatures{});
  const IsaFeatures avx2 = cap_isa(all, "avx2");
  const IsaFeatures avx512 = cap_isa(all, "avx512");
  for (std::string_view n : isa_feature_names()) {
    const bool is_avx2_level = n == "avx2" || n == "fma" || n == "f16c";
    const bool is_amx = n.substr(0, 3) == "amx";
    EXPECT_EQ(*isa_feature(avx2, n), is_avx2_level) << n;
    EXPECT_EQ(*isa_feature(avx512, n), !is_amx) << n;
  }
  // Capping never adds a feature.
  EXPECT_EQ(cap_isa(IsaFeatures{}, "amx"), IsaFeatures{});
}

TEST(IsaNames, AreUniqueAndAddressEveryField) {
  const auto names = isa_feature_names();
  EXPECT_EQ(names.size(), 14u);
  IsaFeatures f;
  for (std::string_view n : names) {
    EXPECT_EQ(std::count(names.begin(), names.end(), n), 1);
    ASSERT_TRUE(set_isa_feature(f, n, true));
    EXPECT_EQ(isa_feature(f, n), true);
  }
  IsaFeatures all;
  for (std::string_view n : names) set_isa_feature(all, n, true);
  EXPECT_EQ(f, all);
  EXPECT_FALSE(isa_feature(f, "sse2").has_value());
  EXPECT_FALSE(set_isa_feature(f, "sse2", true));
}

}  // namespace
}  // namespace mxmoe
