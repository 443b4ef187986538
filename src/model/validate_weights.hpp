// validate(spec, weights) with the names its messages give the tensors: the library's own
// (router_weight, w1, b1, ...) for a checkpoint's layer, the caller's argument names for a
// layer made from tensors (layer_from_tensors), so both paths run the one set of checks.
#pragma once

#include <span>
#include <string_view>

#include "mxmoe/placement.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe {

struct WeightNames {
  std::string_view router_weight = "router_weight";
  std::string_view router_bias = "router_bias";
  std::string_view selection_bias = "selection_bias";
  std::string_view w1 = "w1";
  std::string_view b1 = "b1";
  std::string_view w2 = "w2";
  std::string_view b2 = "b2";
};

void validate(const LayerSpec& spec, const LayerWeights& w, std::span<const ExpertRange> scan,
              const WeightNames& names);

}  // namespace mxmoe
