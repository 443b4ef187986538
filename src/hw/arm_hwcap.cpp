#include "hw/arm_hwcap.hpp"

#include <fstream>
#include <stdexcept>
#include <string>

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
// The bits of the kernel's ABI (arch/arm64/include/uapi/asm/hwcap.h, linux/prctl.h), for
// headers older than the features (SVE2: Linux 5.2; I8MM and BF16: 5.10).
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#ifndef HWCAP_SVE
#define HWCAP_SVE (1UL << 22)
#endif
#ifndef HWCAP2_SVE2
#define HWCAP2_SVE2 (1UL << 1)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1UL << 13)
#endif
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1UL << 14)
#endif
#ifndef PR_SVE_GET_VL
#define PR_SVE_GET_VL 51
#endif
#ifndef PR_SVE_VL_LEN_MASK
#define PR_SVE_VL_LEN_MASK 0xffff
#endif
#endif

namespace mxmoe::hw {

bool is_aarch64() {
#if defined(__aarch64__)
  return true;
#else
  return false;
#endif
}

#if defined(__aarch64__) && defined(__linux__)

ArmHwcaps arm_hwcaps() {
  const unsigned long hwcap = getauxval(AT_HWCAP);
  const unsigned long hwcap2 = getauxval(AT_HWCAP2);
  ArmHwcaps c;
  c.asimd = (hwcap & HWCAP_ASIMD) != 0;
  c.asimddp = c.asimd && (hwcap & HWCAP_ASIMDDP) != 0;
  c.sve = (hwcap & HWCAP_SVE) != 0;
  c.sve2 = c.sve && (hwcap2 & HWCAP2_SVE2) != 0;
  c.i8mm = (hwcap2 & HWCAP2_I8MM) != 0;
  c.bf16 = (hwcap2 & HWCAP2_BF16) != 0;
  if (c.sve) {
    // The calling thread's vector length in bytes, in the low 16 bits; the same for every
    // thread unless a program changes it (mxmoe never does).
    const int vl = prctl(PR_SVE_GET_VL);
    c.sve_vector_bits = vl > 0 ? 8 * (vl & PR_SVE_VL_LEN_MASK) : 0;
    if (c.sve_vector_bits == 0) c.sve = c.sve2 = false;
  }
  return c;
}

#else

// Another OS on aarch64 (or another architecture): no HWCAP to read; no feature is claimed.
ArmHwcaps arm_hwcaps() {
  return {};
}

#endif

std::uint64_t arm_midr() {
  std::ifstream in("/sys/devices/system/cpu/cpu0/regs/identification/midr_el1");
  std::string text;
  if (!(in >> text)) return 0;
  try {
    return std::stoull(text, nullptr, 16);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace mxmoe::hw
