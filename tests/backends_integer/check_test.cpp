// check() of the int8 backends on replayed Hardware: honest ISA / OS / format verdicts.
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/registry.hpp"
#include "int8_test_support.hpp"

namespace mxmoe::int8_test {
namespace {

IsaFeatures avx512_with_vnni() {
  IsaFeatures isa;
  isa.avx2 = isa.fma = isa.f16c = true;
  isa.avx512f = isa.avx512bw = isa.avx512vl = isa.avx512dq = isa.avx512_vnni = true;
  return isa;
}

bool has_code(const std::vector<Rejection>& reasons, ReasonCode code) {
  return std::any_of(reasons.begin(), reasons.end(),
                     [&](const Rejection& r) { return r.code == code; });
}

TEST(Int8BackendChecks, AmxRefusedByTheOsIsOsDenied) {
  Deployment d = int8_deployment(small_spec());
  d.hardware.isa = avx512_with_vnni();
  d.hardware.os_denied = {"amx_tile", "amx_int8", "amx_bf16"};  // a probe where arch_prctl failed
  const auto amx = find_backend("amx_int8")->check(d);
  EXPECT_TRUE(has_code(amx, ReasonCode::os_denied));
  EXPECT_FALSE(has_code(amx, ReasonCode::activation_format));
  EXPECT_TRUE(find_backend("avx512_vnni")->check(d).empty());
}

TEST(Int8BackendChecks, MissingIsaAndOtherFormatsAreRejected) {
  Deployment d = int8_deployment(small_spec());
  d.hardware.isa = IsaFeatures{};
  d.hardware.os_denied.clear();
  d.hardware.isa.avx2 = d.hardware.isa.fma = true;  // an AVX2-only machine
  d.request.activation = ActivationFormat::bf16;
  for (const char* name : {"avx512_vnni", "amx_int8"}) {
    SCOPED_TRACE(name);
    const auto reasons = find_backend(name)->check(d);
    EXPECT_TRUE(has_code(reasons, ReasonCode::unsupported_isa));
    EXPECT_TRUE(has_code(reasons, ReasonCode::activation_format));
  }
}

// An AVX2-only machine (Zen 2/3) runs avx2_int8; AVX-VNNI (Alder Lake) adds avx_vnni_int8.
TEST(Int8BackendChecks, YmmBackendsNeedAvx2AndAvxVnni) {
  Deployment d = int8_deployment(small_spec());
  d.hardware.os_denied.clear();
  d.hardware.isa = IsaFeatures{};
  d.hardware.isa.avx2 = d.hardware.isa.fma = d.hardware.isa.f16c = true;
  EXPECT_TRUE(find_backend("avx2_int8")->check(d).empty());
  const auto vnni = find_backend("avx_vnni_int8")->check(d);
  ASSERT_EQ(vnni.size(), 1u);
  EXPECT_EQ(vnni.front().code, ReasonCode::unsupported_isa);
  EXPECT_EQ(vnni.front().required, "avx_vnni");
  d.hardware.isa.avx_vnni = true;
  EXPECT_TRUE(find_backend("avx_vnni_int8")->check(d).empty());
  d.request.batch_invariant = true;  // one numerics class with avx512_vnni: invariant too
  EXPECT_TRUE(find_backend("avx2_int8")->check(d).empty());
  EXPECT_TRUE(find_backend("avx_vnni_int8")->check(d).empty());
  d.hardware.isa.f16c = false;  // an AVX2 CPU without F16C does not exist, but the check holds
  EXPECT_TRUE(has_code(find_backend("avx2_int8")->check(d), ReasonCode::unsupported_isa));
  d.hardware.isa = IsaFeatures{};
  d.request.activation = ActivationFormat::bf16;
  for (const char* name : {"avx2_int8", "avx_vnni_int8"}) {
    SCOPED_TRACE(name);
    const auto reasons = find_backend(name)->check(d);
    EXPECT_TRUE(has_code(reasons, ReasonCode::unsupported_isa));
    EXPECT_TRUE(has_code(reasons, ReasonCode::activation_format));
  }
}

TEST(Int8BackendChecks, GptOssShapeWithNinetyBlocksIsSupported) {
  Deployment d = int8_deployment(preset("gpt-oss-20b"));
  d.hardware.isa = avx512_with_vnni();
  d.hardware.os_denied.clear();
  d.hardware.isa.amx_tile = d.hardware.isa.amx_int8 = true;
  d.request.batch_invariant = true;
  EXPECT_TRUE(find_backend("avx512_vnni")->check(d).empty());
  EXPECT_TRUE(find_backend("amx_int8")->check(d).empty());
  EXPECT_GT(find_backend("amx_int8")->estimate_us(d), 0.0);
}

}  // namespace
}  // namespace mxmoe::int8_test
