// libFuzzer: the model.safetensors.index.json parser. Every input must parse or raise
// LoadError, and every accepted shard name must be a plain file name.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "io/safetensors.hpp"
#include "mxmoe/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto index = mxmoe::parse_safetensors_index(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.index.json");
    for (const auto& [tensor, shard] : index.weight_map)
      if (!mxmoe::is_plain_file_name(shard) || shard.find('/') != std::string::npos) std::abort();
  } catch (const mxmoe::LoadError&) {
  }
  return 0;
}
