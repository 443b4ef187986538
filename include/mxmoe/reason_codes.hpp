// Why a candidate refuses what it is asked to compute: the closed catalogue of reason codes
// and one failed predicate (Rejection). The vocabulary of every kind of kernel the oracle
// judges (the MoE expert backends, and the dense kernels beside them): docs/REASON_CODES.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/export.h"

namespace mxmoe {

// The closed catalogue of reasons a backend can refuse a deployment. Documented, one row
// per code, in docs/REASON_CODES.md; every code is produced by some test deployment.
enum class ReasonCode : std::uint8_t {
  unsupported_isa,    // the CPU lacks an instruction set the backend needs
  os_denied,          // the CPU has it, the OS refused its state (XCR0 / AMX permission)
  not_compiled,       // the backend was left out of this build
  weight_format,      // expert weights are in a format the backend cannot read
  activation_format,  // the requested activation format is not implemented by the backend
  activation_fn,      // the expert nonlinearity is not implemented by the backend
  routing,            // the routing method is not supported
  shape_alignment,    // a dimension violates the backend's alignment/size rules
  batch_invariance,   // batch invariance requested and not proven for this backend/format
  expert_parallel,    // the expert-parallel configuration is invalid or unsupported
  no_device,          // the backend needs a device (GPU) the Hardware does not have
  user_excluded,      // the user excluded it (--exclude / MXMOE_EXCLUDE_BACKENDS)
  not_forced,         // another backend was forced (--backend / MXMOE_BACKEND)
  reference_only,     // the reference backend: chosen only when forced or allowed
};
MXMOE_API std::string_view to_string(ReasonCode) noexcept;
MXMOE_API std::vector<ReasonCode> all_reason_codes();
MXMOE_API ReasonCode
    parse_reason_code(std::string_view);  // throws std::invalid_argument listing names

// One failed predicate.
struct MXMOE_API Rejection {
  ReasonCode code;
  std::string detail;    // a sentence: what is wrong
  std::string required;  // what the backend needs ("avx512_vnni", "multiple of 32", ...)
  std::string actual;    // what the deployment has
  std::string remedy;    // what the user can do, "" when nothing
  friend bool operator==(const Rejection&, const Rejection&) = default;
};

}  // namespace mxmoe
