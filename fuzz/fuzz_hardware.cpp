// libFuzzer: a hardware probe file (`--hardware FILE`). Every input must parse or raise
// std::invalid_argument; an accepted Hardware is within the documented bounds and survives a
// JSON round trip unchanged.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "mxmoe/hardware.hpp"
#include "mxmoe/runtime.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const mxmoe::Hardware h =
        mxmoe::hardware_from_json(std::string_view(reinterpret_cast<const char*>(data), size));
    if (h.logical_cpus < 1 || h.logical_cpus > mxmoe::kMaxThreads) std::abort();
    if (h.l3_bytes > mxmoe::kMaxCacheBytes) std::abort();
    if (!(mxmoe::hardware_from_json(mxmoe::to_json(h)) == h)) std::abort();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
