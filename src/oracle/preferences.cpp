// Model families' wishes, as data for the one select(). Orderings only break ties between
// equal cost estimates; they name every backend that exists or is planned, and names not
// registered in this build are ignored by judge().
#include "mxmoe/oracle.hpp"

namespace mxmoe {

Preferences preferences_for(Family family) {
  Preferences p;
  p.source = std::string(to_string(family)) + " family";
  // bf16 activations keep every family within its accuracy budget on every backend that
  // implements them; int8/mxfp8 stay opt-in (--activation) until per-family accuracy data
  // says otherwise. Same for the ordering: one ladder until measurements differ per family.
  p.default_activation = ActivationFormat::bf16;
  switch (family) {
    case Family::gpt_oss:
    case Family::mixtral:
    case Family::qwen3_moe:
    case Family::deepseek_v3:
    case Family::deepseek_v4:
      p.order = {"amx_int8",       "amx_bf16",   "avx512_vnni", "avx512_bf16",
                 "avx_vnni_int8",  "avx2_int8",  "avx2_int16",  "avx2",
                 "neon_i8mm_int8", "sve_int8",   "neon_dotprod_int8", "neon_int16",
                 "neon_fp32",      "reference"};
      break;
  }
  return p;
}

}  // namespace mxmoe
