// libFuzzer: config.json of every family (gpt_oss, mixtral, qwen3_moe, deepseek_v3,
// deepseek_v4, nested under text_config or not). Every input must parse or raise LoadError;
// an accepted config must describe a valid layer within the documented bounds.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/model_config.hpp"
#include "mxmoe/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const mxmoe::ModelConfig c = mxmoe::parse_model_config(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.config.json", "m");
    mxmoe::validate(c.moe);  // must not throw: the parser validated it
    if (c.num_layers < 1 || c.num_layers > mxmoe::kMaxModelLayers) std::abort();
    if (c.non_moe_reason.size() != static_cast<std::size_t>(c.num_layers)) std::abort();
    if (c.moe.num_experts > mxmoe::kMaxExperts || c.moe.hidden > mxmoe::kMaxLayerDim ||
        c.moe.intermediate > mxmoe::kMaxLayerDim)
      std::abort();
  } catch (const mxmoe::LoadError&) {
  }
  return 0;
}
