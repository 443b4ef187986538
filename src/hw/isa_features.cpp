// IsaFeatures by name, and the MXMOE_MAX_ISA cap.
#include <array>
#include <stdexcept>
#include <string>

#include "mxmoe/format.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe {
namespace {

struct FeatureField {
  std::string_view name;
  std::string_view arch;
  bool IsaFeatures::*field;
};

// The order of reports and JSON: by architecture, then by ISA generation.
constexpr std::array<FeatureField, 20> kFeatures = {{
    {"avx2", kArchX86_64, &IsaFeatures::avx2},
    {"fma", kArchX86_64, &IsaFeatures::fma},
    {"f16c", kArchX86_64, &IsaFeatures::f16c},
    {"avx512f", kArchX86_64, &IsaFeatures::avx512f},
    {"avx512bw", kArchX86_64, &IsaFeatures::avx512bw},
    {"avx512vl", kArchX86_64, &IsaFeatures::avx512vl},
    {"avx512dq", kArchX86_64, &IsaFeatures::avx512dq},
    {"avx512_vnni", kArchX86_64, &IsaFeatures::avx512_vnni},
    {"avx_vnni", kArchX86_64, &IsaFeatures::avx_vnni},
    {"avx512_bf16", kArchX86_64, &IsaFeatures::avx512_bf16},
    {"avx512_fp16", kArchX86_64, &IsaFeatures::avx512_fp16},
    {"amx_tile", kArchX86_64, &IsaFeatures::amx_tile},
    {"amx_int8", kArchX86_64, &IsaFeatures::amx_int8},
    {"amx_bf16", kArchX86_64, &IsaFeatures::amx_bf16},
    {"asimd", kArchAarch64, &IsaFeatures::asimd},
    {"asimddp", kArchAarch64, &IsaFeatures::asimddp},
    {"i8mm", kArchAarch64, &IsaFeatures::i8mm},
    {"bf16", kArchAarch64, &IsaFeatures::bf16},
    {"sve", kArchAarch64, &IsaFeatures::sve},
    {"sve2", kArchAarch64, &IsaFeatures::sve2},
}};

const FeatureField* find_feature(std::string_view name) {
  for (const FeatureField& f : kFeatures)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace

std::vector<std::string_view> isa_feature_names() {
  std::vector<std::string_view> names;
  names.reserve(kFeatures.size());
  for (const FeatureField& f : kFeatures) names.push_back(f.name);
  return names;
}

std::vector<std::string_view> isa_feature_names(std::string_view arch) {
  std::vector<std::string_view> names;
  for (const FeatureField& f : kFeatures)
    if (f.arch == arch) names.push_back(f.name);
  return names;
}

std::string_view isa_feature_arch(std::string_view name) {
  const FeatureField* f = find_feature(name);
  return f == nullptr ? std::string_view{} : f->arch;
}

std::optional<bool> isa_feature(const IsaFeatures& isa, std::string_view name) {
  const FeatureField* f = find_feature(name);
  if (f == nullptr) return std::nullopt;
  return isa.*(f->field);
}

bool set_isa_feature(IsaFeatures& isa, std::string_view name, bool value) {
  const FeatureField* f = find_feature(name);
  if (f == nullptr) return false;
  isa.*(f->field) = value;
  return true;
}

Mxfp4Decoder fastest_mxfp4_decoder(const IsaFeatures& isa) noexcept {
  if (isa.avx512f) return Mxfp4Decoder::avx512;
  if (isa.avx2 && isa.fma) return Mxfp4Decoder::avx2;
  return Mxfp4Decoder::portable;
}

// A level of one architecture leaves the other's features as they are (a machine has only
// its own), so one MXMOE_MAX_ISA value can be set for a mixed fleet.
IsaFeatures cap_isa(IsaFeatures isa, std::string_view cap) {
  if (cap.empty() || cap == "amx" || cap == "sve") return isa;
  if (cap == "none") return IsaFeatures{};
  if (cap == "avx2" || cap == "avx_vnni") {
    // avx_vnni: an AVX2 client CPU with VNNI on ymm only (Alder Lake, Zen 5 without AVX-512).
    // On a CPU without AVX-VNNI it leaves exactly the avx2 level.
    const bool vnni = cap == "avx_vnni" && isa.avx_vnni;
    isa.avx512f = isa.avx512bw = isa.avx512vl = isa.avx512dq = false;
    isa.avx512_vnni = isa.avx512_bf16 = isa.avx512_fp16 = false;
    isa.amx_tile = isa.amx_int8 = isa.amx_bf16 = false;
    isa.avx_vnni = vnni;
    return isa;
  }
  if (cap == "avx512") {
    isa.amx_tile = isa.amx_int8 = isa.amx_bf16 = false;
    return isa;
  }
  // aarch64: neon < dotprod < i8mm (with bf16: both arrive with Armv8.6) < sve (with sve2).
  if (cap == "neon" || cap == "dotprod" || cap == "i8mm") {
    isa.sve = isa.sve2 = false;
    if (cap != "i8mm") isa.i8mm = isa.bf16 = false;
    if (cap == "neon") isa.asimddp = false;
    return isa;
  }
  throw std::invalid_argument(
      "unknown ISA cap '" + std::string(cap) +
      "' (MXMOE_MAX_ISA; valid: none; x86-64: avx2, avx_vnni, avx512, amx; aarch64: neon, "
      "dotprod, i8mm, sve)");
}

}  // namespace mxmoe
