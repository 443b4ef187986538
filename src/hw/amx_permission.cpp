#include "hw/amx_permission.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mxmoe::hw {

std::string request_amx_tile_permission() {
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kArchGetXcompPerm = 0x1022;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  unsigned long long permitted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &permitted) == 0 &&
      (permitted & (1ULL << kXfeatureXtiledata)) != 0) {
    return "";
  }
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) return "";
  return std::string("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) failed: ") + std::strerror(errno);
#else
  return "AMX tile permission is only requested on x86-64 Linux";
#endif
}

void require_amx_tile_permission(std::string_view backend, std::string_view alternative) {
  const std::string refused = request_amx_tile_permission();
  if (refused.empty()) return;
  throw std::runtime_error(std::string(backend) + ": the OS refused the AMX tile permission (" +
                           refused + "); choose another backend (e.g. " + std::string(alternative) +
                           ")");
}

}  // namespace mxmoe::hw
