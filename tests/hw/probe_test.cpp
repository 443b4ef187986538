// The probe on this machine, the ISA cap, and feature names.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mxmoe/format.hpp"
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
  EXPECT_EQ(h.arch, kArchX86_64);
  for (std::string_view n : isa_feature_names(kArchAarch64)) EXPECT_FALSE(*isa_feature(h.isa, n));
#elif defined(__aarch64__)
  // The aarch64 cross build under qemu-user: the emulated CPU's HWCAP features (every
  // aarch64 CPU has Advanced SIMD), no x86 feature, a vector length exactly with SVE.
  EXPECT_EQ(h.arch, kArchAarch64);
  EXPECT_TRUE(h.isa.asimd);
  for (std::string_view n : isa_feature_names(kArchX86_64)) EXPECT_FALSE(*isa_feature(h.isa, n));
  EXPECT_EQ(h.isa.sve, h.sve_vector_bits > 0);
  EXPECT_EQ(h.sve_vector_bits % 128, 0);
  EXPECT_TRUE(!h.isa.sve2 || h.isa.sve);
  EXPECT_EQ(hardware_from_json(to_json(h)), h);
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
  EXPECT_EQ(cap_isa(all, "sve"), all);
  EXPECT_EQ(cap_isa(all, "none"), IsaFeatures{});
  // Each level: the features it keeps of its own architecture; the other's are untouched.
  const auto kept = [](std::string_view level, std::string_view n) {
    const bool arm = isa_feature_arch(n) == kArchAarch64;
    if (level == "avx2") return arm || n == "avx2" || n == "fma" || n == "f16c";
    if (level == "avx_vnni") return arm || n == "avx2" || n == "fma" || n == "f16c" || n == "avx_vnni";
    if (level == "avx512") return arm || n.substr(0, 3) != "amx";
    if (level == "neon") return !arm || n == "asimd";
    if (level == "dotprod") return !arm || n == "asimd" || n == "asimddp";
    if (level == "i8mm") return !arm || (n != "sve" && n != "sve2");
    return false;
  };
  for (std::string_view level : {"avx2", "avx_vnni", "avx512", "neon", "dotprod", "i8mm"}) {
    const IsaFeatures capped = cap_isa(all, level);
    for (std::string_view n : isa_feature_names())
      EXPECT_EQ(*isa_feature(capped, n), kept(level, n)) << level << " " << n;
  }
  // Capping never adds a feature.
  for (std::string_view level : {"amx", "avx2", "sve", "neon"})
    EXPECT_EQ(cap_isa(IsaFeatures{}, level), IsaFeatures{}) << level;
  EXPECT_THROW((void)cap_isa(all, "sve3"), std::invalid_argument);
}

// Every feature belongs to one architecture, and a machine's JSON holds only its own.
// The MXFP4 decoder of dequantize_mxfp4_fast follows the capped features, so MXMOE_MAX_ISA
// holds there as for the backends (it once read the CPU directly and ran AVX-512 under an
// avx2 cap).
TEST(CapIsa, PicksTheMxfp4DecoderTheCapAllows) {
  mxmoe::IsaFeatures all;
  all.avx2 = all.fma = all.f16c = all.avx512f = all.avx512bw = all.avx512vl = all.avx512dq = true;
  EXPECT_EQ(mxmoe::fastest_mxfp4_decoder(all), mxmoe::Mxfp4Decoder::avx512);
  EXPECT_EQ(mxmoe::fastest_mxfp4_decoder(mxmoe::cap_isa(all, "avx2")), mxmoe::Mxfp4Decoder::avx2);
  EXPECT_EQ(mxmoe::fastest_mxfp4_decoder(mxmoe::cap_isa(all, "none")),
            mxmoe::Mxfp4Decoder::portable);
  mxmoe::IsaFeatures arm;
  arm.asimd = arm.asimddp = arm.sve = true;
  EXPECT_EQ(mxmoe::fastest_mxfp4_decoder(arm), mxmoe::Mxfp4Decoder::portable);
  // The probe of this machine capped at avx2 never picks the AVX-512 decoder.
  EXPECT_NE(mxmoe::fastest_mxfp4_decoder(mxmoe::probe_hardware("avx2").isa),
            mxmoe::Mxfp4Decoder::avx512);
}

// A Hardware whose isa lacks avx2 (MXMOE_MAX_ISA=none, or an older CPU) decodes MXFP4 on the
// portable path, with dequantize_mxfp4's bits.
TEST(CapIsa, ACapBelowAvx2DecodesMxfp4PortablyWithTheSameBits) {
  Hardware hw = probe_hardware();
  hw.isa = cap_isa(hw.isa, "none");
  ASSERT_FALSE(hw.isa.avx2);
  const Mxfp4Decoder decoder = fastest_mxfp4_decoder(hw.isa);
  EXPECT_EQ(decoder, Mxfp4Decoder::portable);
  constexpr std::size_t kBlocks = 64;
  std::vector<std::uint8_t> packed(kBlocks * kMxfp4BlockBytes), scales(kBlocks);
  for (std::size_t i = 0; i < packed.size(); ++i)
    packed[i] = static_cast<std::uint8_t>((i * 37u + 11u) & 0xFFu);
  for (std::size_t b = 0; b < kBlocks; ++b) scales[b] = static_cast<std::uint8_t>(100u + b);
  std::vector<float> expected(kBlocks * kMxBlock), actual(kBlocks * kMxBlock);
  dequantize_mxfp4(packed, scales, expected);
  dequantize_mxfp4_fast(packed, scales, actual, decoder);
  EXPECT_EQ(std::memcmp(expected.data(), actual.data(), expected.size() * sizeof(float)), 0);
}

TEST(IsaNames, EachArchitectureHasItsOwnFeatures) {
  const auto x86 = isa_feature_names(kArchX86_64), arm = isa_feature_names(kArchAarch64);
  EXPECT_EQ(x86.size(), 14u);
  EXPECT_EQ(arm.size(), 6u);
  EXPECT_EQ(x86.size() + arm.size(), isa_feature_names().size());
  for (std::string_view n : x86) EXPECT_EQ(isa_feature_arch(n), kArchX86_64) << n;
  for (std::string_view n : arm) EXPECT_EQ(isa_feature_arch(n), kArchAarch64) << n;
  EXPECT_TRUE(isa_feature_names("riscv64").empty());
  EXPECT_EQ(isa_feature_arch("sse2"), "");
}

TEST(HardwareJson, AnAarch64ProbeRoundTripsAndRefusesOtherArchitecturesFeatures) {
  Hardware h;
  h.arch = std::string(kArchAarch64);
  h.vendor = "ARM";
  h.model = "Neoverse-V1";
  h.logical_cpus = 64;
  h.isa.asimd = h.isa.asimddp = h.isa.sve = true;
  h.sve_vector_bits = 256;
  const std::string text = to_json(h);
  EXPECT_EQ(hardware_from_json(text), h);
  EXPECT_EQ(text.find("avx2"), std::string::npos) << "an Arm probe lists no x86 feature";
  // An x86 feature in an Arm probe, an unknown arch, a vector length that disagrees with sve.
  const auto refused = [&](const std::string& from, const std::string& to, const char* says) {
    std::string bad = text;
    const std::size_t at = bad.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    bad.replace(at, from.size(), to);
    try {
      (void)hardware_from_json(bad);
      ADD_FAILURE() << "accepted: " << to;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused("\"asimd\": true", "\"asimd\": true, \"avx2\": true", "is of x86_64");
  refused("\"aarch64\"", "\"riscv64\"", "Hardware.arch");
  refused("\"sve_vector_bits\": 256", "\"sve_vector_bits\": 200", "multiple of 128");
  refused("\"sve\": true", "\"sve\": false", "sve_vector_bits");
  refused("\"asimddp\": true,", "", "missing feature \"asimddp\"");
  refused("\"asimd\": true", "\"asimd\": false", "need asimd");
  refused("\"os_denied\": []", "\"os_denied\": [\"amx_tile\"]", "not a feature of aarch64");
}

// A file written before "arch" existed is an x86-64 probe, as every such file was.
TEST(HardwareJson, AFileWithoutArchIsAnX86Probe) {
  Hardware h;
  h.vendor = "AuthenticAMD";
  h.logical_cpus = 2;
  h.isa.avx2 = true;
  std::string text = to_json(h);
  for (const char* key : {"  \"arch\": \"x86_64\",\n", "  \"sve_vector_bits\": 0,\n"}) {
    const std::size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << key;
    text.erase(at, std::string(key).size());
  }
  EXPECT_EQ(hardware_from_json(text), h);
}

TEST(IsaNames, AreUniqueAndAddressEveryField) {
  const auto names = isa_feature_names();
  EXPECT_EQ(names.size(), 20u);
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
