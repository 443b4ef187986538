// The raw x86 feature queries, kept apart from the logic that interprets them.
#pragma once

#include <cstdint>
#include <string>

namespace mxmoe::hw {

struct CpuidRegs {
  std::uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

bool is_x86();  // false on other architectures: every query below then returns zeros
CpuidRegs cpuid(std::uint32_t leaf, std::uint32_t subleaf = 0);
std::uint64_t xgetbv0();  // XCR0; 0 when OSXSAVE is off

bool has_bit(std::uint32_t reg, int bit);

}  // namespace mxmoe::hw
