// The kernel instruction-set table (kernel_isa.inc) on the C++ side: which features each
// kernel folder is compiled for, and whether this build compiled it at all.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <vector>

namespace mxmoe {

enum class KernelIsa : std::uint8_t {
#define MXMOE_KERNEL_ISA(SET, ARCH, FEATURES) SET,
#include "backends/kernel_isa.inc"
#undef MXMOE_KERNEL_ISA
};

std::string_view to_string(KernelIsa) noexcept;
// The architecture the set is compiled for ("x86_64", "aarch64": Hardware.arch's names).
std::string_view kernel_isa_arch(KernelIsa) noexcept;
// The features of the set, as listed in kernel_isa.inc (views of static storage).
std::vector<std::string_view> kernel_isa_features(KernelIsa);
// False when this build left the set out (a non-x86 target compiles no kernel folder).
bool kernel_isa_compiled(KernelIsa) noexcept;

// The union of the sets' features, in first-listed order (what check() requires).
std::vector<std::string_view> kernel_isa_features(std::initializer_list<KernelIsa> sets);

}  // namespace mxmoe
