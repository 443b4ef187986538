// The Linux permission to use AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM). It is granted
// per process, so every thread (the pool's workers included) may use tiles once it is held.
// The one place mxmoe asks for it: the probe, the amx backends and the peak loops call this.
#pragma once

#include <string>

namespace mxmoe::hw {

// Requests the permission (idempotent). Returns "" when held, else why it was refused.
std::string request_amx_tile_permission();

}  // namespace mxmoe::hw
