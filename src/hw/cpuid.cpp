#include "hw/cpuid.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#endif

namespace mxmoe::hw {

bool has_bit(std::uint32_t reg, int bit) {
  return ((reg >> bit) & 1U) != 0;
}

#if defined(__x86_64__) || defined(__i386__)

bool is_x86() {
  return true;
}

CpuidRegs cpuid(std::uint32_t leaf, std::uint32_t subleaf) {
  CpuidRegs r;
  const unsigned max_leaf = __get_cpuid_max(leaf & 0x80000000U, nullptr);
  if (max_leaf < leaf) return r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

std::uint64_t xgetbv0() {
  if (!has_bit(cpuid(1).ecx, 27)) return 0;  // OSXSAVE: the OS manages XCR0
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

#else

bool is_x86() {
  return false;
}
CpuidRegs cpuid(std::uint32_t, std::uint32_t) {
  return {};
}
std::uint64_t xgetbv0() {
  return 0;
}

#endif

}  // namespace mxmoe::hw
