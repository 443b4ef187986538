#include "backends/kernel_isa.hpp"

#include <algorithm>
#include <array>

namespace mxmoe {
namespace {

struct Entry {
  std::string_view name;
  std::string_view arch;
  std::string_view features;  // space-separated
};

constexpr std::array kTable = {
#define MXMOE_KERNEL_ISA(SET, ARCH, FEATURES) Entry{#SET, #ARCH, FEATURES},
#include "backends/kernel_isa.inc"
#undef MXMOE_KERNEL_ISA
};

// Set by CMake: the names of the kernel folders this build compiled, space-separated.
#ifndef MXMOE_COMPILED_KERNEL_ISAS
#error "MXMOE_COMPILED_KERNEL_ISAS must be defined by the build"
#endif
constexpr std::string_view kCompiled = MXMOE_COMPILED_KERNEL_ISAS;

std::vector<std::string_view> split(std::string_view text) {
  std::vector<std::string_view> words;
  while (!text.empty()) {
    const std::size_t start = text.find_first_not_of(' ');
    if (start == std::string_view::npos) break;
    text.remove_prefix(start);
    const std::size_t end = std::min(text.find(' '), text.size());
    words.push_back(text.substr(0, end));
    text.remove_prefix(end);
  }
  return words;
}

}  // namespace

std::string_view to_string(KernelIsa set) noexcept {
  return kTable[static_cast<std::size_t>(set)].name;
}

std::string_view kernel_isa_arch(KernelIsa set) noexcept {
  return kTable[static_cast<std::size_t>(set)].arch;
}

std::vector<std::string_view> kernel_isa_features(KernelIsa set) {
  return split(kTable[static_cast<std::size_t>(set)].features);
}

bool kernel_isa_compiled(KernelIsa set) noexcept {
  for (std::string_view name : split(kCompiled))
    if (name == to_string(set)) return true;
  return false;
}

std::vector<std::string_view> kernel_isa_features(std::initializer_list<KernelIsa> sets) {
  std::vector<std::string_view> all;
  for (KernelIsa set : sets)
    for (std::string_view f : kernel_isa_features(set))
      if (std::find(all.begin(), all.end(), f) == all.end()) all.push_back(f);
  return all;
}

}  // namespace mxmoe
