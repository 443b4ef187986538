// libFuzzer: the safetensors header + data-layout parser on arbitrary bytes. Every input
// must either parse or raise LoadError; any other exception, crash or sanitizer report is
// a bug. A parsed header is checked against the buffer it came from.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "io/safetensors.hpp"
#include "mxmoe/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto header = mxmoe::parse_safetensors(std::span(data, size), "fuzz.safetensors");
    std::uint64_t next = 0;
    for (const auto& t : header.tensors) {
      if (t.begin != next || t.end < t.begin) std::abort();
      next = t.end;
    }
    if (header.data_start + next != size) std::abort();
  } catch (const mxmoe::LoadError&) {
  }
  return 0;
}
