// Hardware: what a machine can run, as plain data. Probed once at the edge (CLI, C API),
// capped by MXMOE_MAX_ISA there, and from then on only passed around, so a selection is a
// pure function of its inputs and a probe captured on another machine can be replayed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/export.h"
#include "mxmoe/format.hpp"  // Mxfp4Decoder

namespace mxmoe {

// The architectures whose features mxmoe knows, by their names in JSON and reports.
inline constexpr std::string_view kArchX86_64 = "x86_64";
inline constexpr std::string_view kArchAarch64 = "aarch64";

// Instruction-set features of every known architecture; a machine has only its own
// architecture's (isa_feature_names(arch)). Each is true only if the CPU reports it AND the OS
// enabled it: on x86-64 cpuid plus the register state in XCR0 (for AMX also the arch_prctl
// permission); on aarch64 the kernel's HWCAP/HWCAP2 bits, which it sets only for what it
// enabled.
struct MXMOE_API IsaFeatures {
  // x86-64
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx_vnni = false, avx512_bf16 = false, avx512_fp16 = false;
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;
  // aarch64, with the kernel's HWCAP names: Advanced SIMD (NEON), its int8 dot products
  // (sdot/udot), the int8 and bf16 matrix multiplies, SVE and SVE2.
  bool asimd = false, asimddp = false, i8mm = false, bf16 = false, sve = false, sve2 = false;
  friend bool operator==(const IsaFeatures&, const IsaFeatures&) = default;
};

// Names as used in JSON and reports ("avx512_vnni", "amx_int8", "asimddp", ...), in a fixed
// order: every architecture's, or one architecture's (empty for an unknown one).
MXMOE_API std::vector<std::string_view> isa_feature_names();
MXMOE_API std::vector<std::string_view> isa_feature_names(std::string_view arch);
// The architecture a feature belongs to (kArchX86_64, kArchAarch64); "" for an unknown name.
MXMOE_API std::string_view isa_feature_arch(std::string_view name);
// Reads/writes one feature by name; std::nullopt / false for an unknown name.
MXMOE_API std::optional<bool> isa_feature(const IsaFeatures&, std::string_view name);
MXMOE_API bool set_isa_feature(IsaFeatures&, std::string_view name, bool value);

struct MXMOE_API CudaDevice {
  std::string name;
  int sm = 0;  // compute capability, e.g. 90
  std::uint64_t memory_bytes = 0;
  friend bool operator==(const CudaDevice&, const CudaDevice&) = default;
};

// Bounds on a pool's size (Runtime, mxmoe/runtime.hpp): more threads than logical CPUs is
// allowed (an engine may know better) but each one costs a stack and a wake-up, so sizes are
// capped here.
inline constexpr int kMaxThreads = 1024;

// Bounds of a Hardware read from JSON (and of a probe): at most kMaxThreads logical CPUs,
// since mxmoe never runs more threads (a machine with more is described as having that many),
// and caches of at most 1 TiB.
inline constexpr std::uint64_t kMaxCacheBytes = std::uint64_t{1} << 40;

struct MXMOE_API Hardware {
  std::string arch{kArchX86_64};  // kArchX86_64 or kArchAarch64
  std::string vendor;             // "GenuineIntel"; on aarch64 the implementer ("ARM")
  std::string model;              // brand string; on aarch64 the part ("Neoverse-V1")
  int logical_cpus = 0;           // 1..kMaxThreads
  std::uint64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;
  IsaFeatures isa;                     // usable features (only of `arch`)
  int sve_vector_bits = 0;             // aarch64 with SVE: the vector length (128..2048)
  std::vector<std::string> os_denied;  // features the CPU has but the OS refused (names)
  std::string isa_cap;                 // MXMOE_MAX_ISA applied at probe time ("" = none)
  std::vector<CudaDevice> cuda_devices;
  std::string source = "probe";  // "probe" or the file it was loaded from
  friend bool operator==(const Hardware&, const Hardware&) = default;
};

// Probes this machine (x86-64: cpuid, xgetbv, AMX permission request; aarch64: HWCAP,
// HWCAP2, the SVE vector length, MIDR; both: sysfs caches), then applies the cap. cap: ""
// (none), "none"; x86-64 levels "avx2", "avx_vnni" (avx2 and AVX-VNNI on ymm, no AVX-512),
// "avx512", "amx"; aarch64 levels "neon" (asimd only), "dotprod" (+ asimddp), "i8mm"
// (+ i8mm, bf16), "sve" (+ sve, sve2). A level caps its own architecture's features only
// ("none" clears all); throws std::invalid_argument for other values.
MXMOE_API Hardware probe_hardware(std::string_view isa_cap = "");
// Clears the features above the cap (pure; used by probe_hardware and by tests).
MXMOE_API IsaFeatures cap_isa(IsaFeatures isa, std::string_view cap);
// The fastest decoder of dequantize_mxfp4_fast (format.hpp) that `isa` allows.
MXMOE_API Mxfp4Decoder fastest_mxfp4_decoder(const IsaFeatures& isa) noexcept;

MXMOE_API std::string to_json(const Hardware&);
MXMOE_API Hardware hardware_from_json(std::string_view);  // strict; throws std::invalid_argument
// A probe saved by `mxmoe info --hardware --json` in the file PATH (a regular file of at most
// 64 MiB), with `source` set to PATH. A file that cannot be read or whose contents
// hardware_from_json refuses is the file's problem: LoadError (errors.hpp) naming PATH,
// as for every file mxmoe reads (exit code 1, MXMOE_ERROR_IO, mxmoe.LoadError).
MXMOE_API Hardware hardware_from_file(const std::string& path);

}  // namespace mxmoe
