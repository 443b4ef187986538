// Names of the closed catalogue of reason codes (docs/REASON_CODES.md documents each).
#include <array>

#include "base/enum_names.hpp"
#include "mxmoe/reason_codes.hpp"

namespace mxmoe {
namespace {

constexpr std::array<std::string_view, 14> kReasonNames = {
    "unsupported_isa", "os_denied",     "not_compiled",    "weight_format",    "activation_format",
    "activation_fn",   "routing",       "shape_alignment", "batch_invariance", "expert_parallel",
    "no_device",       "user_excluded", "not_forced",      "reference_only"};

}  // namespace

std::string_view to_string(ReasonCode code) noexcept {
  return enum_names::name_of(code, kReasonNames);
}

std::vector<ReasonCode> all_reason_codes() {
  std::vector<ReasonCode> codes;
  for (std::size_t i = 0; i < kReasonNames.size(); ++i) codes.push_back(static_cast<ReasonCode>(i));
  return codes;
}

ReasonCode parse_reason_code(std::string_view name) {
  if (name == "judge_only") return ReasonCode::reference_only;  // its former name
  return enum_names::parse<ReasonCode>(name, kReasonNames, "reason code");
}

}  // namespace mxmoe
