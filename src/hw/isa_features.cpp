// IsaFeatures by name, and the MXMOE_MAX_ISA cap.
#include <array>
#include <stdexcept>
#include <string>

#include "mxmoe/hardware.hpp"

namespace mxmoe {
namespace {

struct FeatureField {
  std::string_view name;
  bool IsaFeatures::*field;
};

// The order of reports and JSON: by ISA generation.
constexpr std::array<FeatureField, 14> kFeatures = {{
    {"avx2", &IsaFeatures::avx2},
    {"fma", &IsaFeatures::fma},
    {"f16c", &IsaFeatures::f16c},
    {"avx512f", &IsaFeatures::avx512f},
    {"avx512bw", &IsaFeatures::avx512bw},
    {"avx512vl", &IsaFeatures::avx512vl},
    {"avx512dq", &IsaFeatures::avx512dq},
    {"avx512_vnni", &IsaFeatures::avx512_vnni},
    {"avx_vnni", &IsaFeatures::avx_vnni},
    {"avx512_bf16", &IsaFeatures::avx512_bf16},
    {"avx512_fp16", &IsaFeatures::avx512_fp16},
    {"amx_tile", &IsaFeatures::amx_tile},
    {"amx_int8", &IsaFeatures::amx_int8},
    {"amx_bf16", &IsaFeatures::amx_bf16},
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

IsaFeatures cap_isa(IsaFeatures isa, std::string_view cap) {
  if (cap.empty() || cap == "amx") return isa;
  if (cap == "none") return IsaFeatures{};
  if (cap == "avx2" || cap == "avx_vnni") {
    // avx_vnni: an AVX2 client CPU with VNNI on ymm only (Alder Lake, Zen 5 without AVX-512).
    // On a CPU without AVX-VNNI it leaves exactly the avx2 level.
    IsaFeatures kept;
    kept.avx2 = isa.avx2;
    kept.fma = isa.fma;
    kept.f16c = isa.f16c;
    kept.avx_vnni = cap == "avx_vnni" && isa.avx_vnni;
    return kept;
  }
  if (cap == "avx512") {
    isa.amx_tile = isa.amx_int8 = isa.amx_bf16 = false;
    return isa;
  }
  throw std::invalid_argument("unknown ISA cap '" + std::string(cap) +
                              "' (MXMOE_MAX_ISA; valid: none, avx2, avx_vnni, avx512, amx)");
}

}  // namespace mxmoe
