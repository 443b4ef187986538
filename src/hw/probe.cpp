// probe_hardware: what this machine can run, confirmed usable by the OS. A feature the CPU
// reports but whose register state the OS did not enable (XCR0) or refused (AMX permission)
// is left false and named in os_denied, so the oracle can say "os_denied" rather than
// "unsupported_isa".
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "hw/amx_permission.hpp"
#include "hw/arm_hwcap.hpp"
#include "hw/cpuid.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe {
namespace {

using hw::has_bit;

std::string trim(std::string s) {
  const auto not_space = [](unsigned char c) { return c != ' ' && c != '\0' && c != '\n'; };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

std::string regs_text(std::initializer_list<std::uint32_t> regs) {
  std::string text;
  for (std::uint32_t r : regs) {
    char bytes[4];
    std::memcpy(bytes, &r, 4);
    text.append(bytes, 4);
  }
  return text;
}

std::string fmt_hex(unsigned v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  do {
    text.insert(text.begin(), kDigits[v % 16]);
    v /= 16;
  } while (v != 0);
  return "0x" + text;
}

std::string cpu_vendor() {
  const hw::CpuidRegs r = hw::cpuid(0);
  return trim(regs_text({r.ebx, r.edx, r.ecx}));
}

std::string cpu_brand() {
  if (hw::cpuid(0x80000000U).eax < 0x80000004U) return "";
  std::string brand;
  for (std::uint32_t leaf = 0x80000002U; leaf <= 0x80000004U; ++leaf) {
    const hw::CpuidRegs r = hw::cpuid(leaf);
    brand += regs_text({r.eax, r.ebx, r.ecx, r.edx});
  }
  return trim(brand);
}

int logical_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
}

// "48K", "2048K", "105M" -> bytes; 0 when unreadable.
std::uint64_t parse_cache_size(const std::string& text) {
  std::uint64_t value = 0;
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9')
    value = value * 10 + static_cast<std::uint64_t>(text[i++] - '0');
  if (i < text.size() && text[i] == 'K') value <<= 10;
  if (i < text.size() && text[i] == 'M') value <<= 20;
  return value;
}

std::string read_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return trim(line);
}

void caches_from_sysfs(Hardware& h) {
  const std::filesystem::path dir = "/sys/devices/system/cpu/cpu0/cache";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind("index", 0) != 0) continue;
    const std::string level = read_line(entry.path() / "level");
    const std::string type = read_line(entry.path() / "type");
    const std::uint64_t size = parse_cache_size(read_line(entry.path() / "size"));
    if (level == "1" && type == "Data") h.l1d_bytes = size;
    if (level == "2" && type != "Instruction") h.l2_bytes = size;
    if (level == "3" && type != "Instruction") h.l3_bytes = size;
  }
}

// Deterministic cache parameters (Intel leaf 4), used when sysfs is unavailable.
void caches_from_cpuid(Hardware& h) {
  if (hw::cpuid(0).eax < 4) return;
  for (std::uint32_t sub = 0; sub < 16; ++sub) {
    const hw::CpuidRegs r = hw::cpuid(4, sub);
    const std::uint32_t type = r.eax & 0x1FU;  // 1 data, 2 instruction, 3 unified
    if (type == 0) break;
    const std::uint32_t level = (r.eax >> 5) & 0x7U;
    const std::uint64_t ways = ((r.ebx >> 22) & 0x3FFU) + 1;
    const std::uint64_t partitions = ((r.ebx >> 12) & 0x3FFU) + 1;
    const std::uint64_t line = (r.ebx & 0xFFFU) + 1;
    const std::uint64_t sets = static_cast<std::uint64_t>(r.ecx) + 1;
    const std::uint64_t size = ways * partitions * line * sets;
    if (level == 1 && type == 1) h.l1d_bytes = size;
    if (level == 2 && type != 2) h.l2_bytes = size;
    if (level == 3 && type != 2) h.l3_bytes = size;
  }
}

// What the CPU reports (cpuid) and what the OS enabled (XCR0, AMX permission).
void probe_isa(Hardware& h) {
  if (!hw::is_x86()) return;
  const hw::CpuidRegs l1 = hw::cpuid(1);
  const bool has_leaf7 = hw::cpuid(0).eax >= 7;
  const hw::CpuidRegs l7 = has_leaf7 ? hw::cpuid(7, 0) : hw::CpuidRegs{};
  const hw::CpuidRegs l7s1 = has_leaf7 && l7.eax >= 1 ? hw::cpuid(7, 1) : hw::CpuidRegs{};

  IsaFeatures cpu;
  const bool avx = has_bit(l1.ecx, 28);
  cpu.fma = avx && has_bit(l1.ecx, 12);
  cpu.f16c = avx && has_bit(l1.ecx, 29);
  cpu.avx2 = avx && has_bit(l7.ebx, 5);
  cpu.avx512f = has_bit(l7.ebx, 16);
  cpu.avx512dq = cpu.avx512f && has_bit(l7.ebx, 17);
  cpu.avx512bw = cpu.avx512f && has_bit(l7.ebx, 30);
  cpu.avx512vl = cpu.avx512f && has_bit(l7.ebx, 31);
  cpu.avx512_vnni = cpu.avx512f && has_bit(l7.ecx, 11);
  cpu.avx512_fp16 = cpu.avx512f && has_bit(l7.edx, 23);
  cpu.avx512_bf16 = cpu.avx512f && has_bit(l7s1.eax, 5);
  cpu.avx_vnni = cpu.avx2 && has_bit(l7s1.eax, 4);
  cpu.amx_tile = has_bit(l7.edx, 24);
  cpu.amx_int8 = cpu.amx_tile && has_bit(l7.edx, 25);
  cpu.amx_bf16 = cpu.amx_tile && has_bit(l7.edx, 22);

  const std::uint64_t xcr0 = hw::xgetbv0();
  const auto xcr0_has = [xcr0](std::uint64_t mask) { return (xcr0 & mask) == mask; };
  const bool ymm_state = xcr0_has(0x6);       // SSE + AVX (YMM upper halves)
  const bool zmm_state = xcr0_has(0xE6);      // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool tile_state = xcr0_has(0x60000);  // XTILECFG (17) + XTILEDATA (18)
  const bool amx_state = cpu.amx_tile && tile_state && hw::request_amx_tile_permission().empty();

  h.isa = cpu;
  h.os_denied.clear();
  const auto deny = [&h](std::string_view name, bool cpu_has, bool os_allows) {
    if (cpu_has && !os_allows) {
      set_isa_feature(h.isa, name, false);
      h.os_denied.emplace_back(name);
    }
  };
  for (std::string_view name : {"avx2", "fma", "f16c", "avx_vnni"})
    deny(name, isa_feature(cpu, name).value_or(false), ymm_state);
  for (std::string_view name :
       {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16", "avx512_fp16"})
    deny(name, isa_feature(cpu, name).value_or(false), zmm_state);
  for (std::string_view name : {"amx_tile", "amx_int8", "amx_bf16"})
    deny(name, isa_feature(cpu, name).value_or(false), amx_state);
}

// aarch64: the HWCAP features, and vendor and part from MIDR_EL1 where the kernel shows it.
void probe_isa_aarch64(Hardware& h) {
  const hw::ArmHwcaps c = hw::arm_hwcaps();
  h.isa = IsaFeatures{};
  h.isa.asimd = c.asimd;
  h.isa.asimddp = c.asimddp;
  h.isa.i8mm = c.i8mm;
  h.isa.bf16 = c.bf16;
  h.isa.sve = c.sve;
  h.isa.sve2 = c.sve2;
  h.sve_vector_bits = c.sve_vector_bits;
  h.os_denied.clear();
  const std::uint64_t midr = hw::arm_midr();
  if (midr == 0) return;
  const auto implementer = static_cast<unsigned>((midr >> 24) & 0xFFU);
  const auto part = static_cast<unsigned>((midr >> 4) & 0xFFFU);
  h.vendor = implementer == 0x41U   ? "ARM"
             : implementer == 0x4EU ? "NVIDIA"
             : implementer == 0xC0U ? "Ampere"
                                    : fmt_hex(implementer);
  if (implementer == 0x41U && part == 0xD0CU) h.model = "Neoverse-N1";
  else if (implementer == 0x41U && part == 0xD40U) h.model = "Neoverse-V1";
  else if (implementer == 0x41U && part == 0xD4FU) h.model = "Neoverse-V2";
  else h.model = "part " + fmt_hex(part);
}

}  // namespace

Hardware probe_hardware(std::string_view isa_cap) {
  Hardware h;
  if (hw::is_aarch64()) {
    h.arch = std::string(kArchAarch64);
    probe_isa_aarch64(h);
  } else {
    h.vendor = cpu_vendor();
    h.model = cpu_brand();
  }
  h.logical_cpus = std::clamp(logical_cpus(), 1, kMaxThreads);  // the JSON form's bound
  caches_from_sysfs(h);
  if (h.l1d_bytes == 0 && h.l2_bytes == 0 && h.l3_bytes == 0) caches_from_cpuid(h);
  for (std::uint64_t* bytes : {&h.l1d_bytes, &h.l2_bytes, &h.l3_bytes})
    *bytes = std::min(*bytes, kMaxCacheBytes);
  probe_isa(h);
  h.isa = cap_isa(h.isa, isa_cap);
  if (!h.isa.sve) h.sve_vector_bits = 0;
  h.isa_cap = std::string(isa_cap);
  h.source = "probe";
  return h;
}

}  // namespace mxmoe
