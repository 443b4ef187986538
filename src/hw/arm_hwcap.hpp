// The raw aarch64 feature queries (the kernel's auxiliary vector, the SVE vector length, the
// main ID register), kept apart from the logic that interprets them, as cpuid.hpp for x86.
#pragma once

#include <cstdint>

namespace mxmoe::hw {

struct ArmHwcaps {
  bool asimd = false, asimddp = false, i8mm = false, bf16 = false, sve = false, sve2 = false;
  int sve_vector_bits = 0;  // 0 without SVE
};

bool is_aarch64();  // a build for aarch64 (any OS)
// Linux on aarch64 only; elsewhere no feature is claimed.
// The features the kernel reports in AT_HWCAP and AT_HWCAP2. The kernel sets a bit only for a
// feature it has enabled, so these are usable as they are (no XCR0-like second check).
ArmHwcaps arm_hwcaps();
// MIDR_EL1 of cpu0 from sysfs (the kernel exports it; user space cannot read the register
// itself); 0 when absent (also under qemu-user, which shows the host's sysfs).
std::uint64_t arm_midr();

}  // namespace mxmoe::hw
