// Random MXFP4 checkpoints with a preset's shape: what `mxmoe generate` and the Python
// package's mxmoe.generate() write, to try the library without downloading a model.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "mxmoe/export.h"
#include "mxmoe/layer_spec.hpp"

namespace mxmoe {

// New sizes for a layer spec; 0 keeps the spec's own.
struct MXMOE_API LayerResize {
  int experts = 0, top_k = 0, hidden = 0, intermediate = 0;
};

// SPEC with the sizes of RESIZE. The shared experts keep their count and take the new
// intermediate size each; DeepSeek-V3's expert groups fall back to one group when the new
// expert count does not divide into them. Throws std::invalid_argument (from validate())
// naming the field when the result is not a valid layer.
MXMOE_API LayerSpec resize(LayerSpec spec, const LayerResize& resize);

struct MXMOE_API GenerateOptions {
  int layers = 1;
  std::uint64_t seed = 1;                            // layer N's weights come from seed + N
  bool force = false;                                // replace an existing OUT as a whole
  std::function<void(const std::string&)> progress;  // one line per layer; may be empty
};

// Writes a checkpoint of options.layers MoE layers with SPEC's shape and random weights (every
// E2M1 code, E8M0 scales sized for unit-variance outputs): config.json of SPEC's family and
// the gpt-oss MXFP4 layout, one safetensors file per layer (a sharded index above one). It is
// written into a temporary sibling directory and renamed into place when complete, so OUT is
// either the whole checkpoint or untouched. Throws LoadError (I/O, OUT exists without force)
// or std::invalid_argument (SPEC not expressible as a config.json, layers outside 1..4096).
MXMOE_API void generate_checkpoint(const std::string& out, const LayerSpec& spec,
                                   const GenerateOptions& options = {});

}  // namespace mxmoe
