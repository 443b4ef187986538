// The Linux permission to use AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM). It is granted
// per process, so every thread (the pool's workers included) may use tiles once it is held.
// The one place mxmoe asks for it: the probe, the amx backends and the peak loops call this.
#pragma once

#include <string>
#include <string_view>

namespace mxmoe::hw {

// Requests the permission (idempotent). Returns "" when held, else why it was refused.
std::string request_amx_tile_permission();

// For a backend's create(): requests the permission, or throws std::runtime_error saying that
// the OS refused it to `backend` and suggesting `alternative`.
void require_amx_tile_permission(std::string_view backend, std::string_view alternative);

}  // namespace mxmoe::hw
