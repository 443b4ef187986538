// libFuzzer: the .npy reader on arbitrary bytes (both with and without bfloat16-as-<u2).
// Every input must parse or raise LoadError; an accepted array holds exactly its shape's
// element count, within the documented rank bound.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "io/npy.hpp"
#include "mxmoe/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  for (const bool bf16 : {false, true}) {
    try {
      const mxmoe::NpyArray a = mxmoe::parse_npy(std::span(data, size), "fuzz.npy", bf16);
      std::uint64_t count = 1;
      for (const std::int64_t d : a.shape) {
        if (d < 0) std::abort();
        count *= static_cast<std::uint64_t>(d);
      }
      if (count != a.data.size() || a.shape.size() > mxmoe::kMaxNpyRank) std::abort();
    } catch (const mxmoe::LoadError&) {
    }
  }
  return 0;
}
