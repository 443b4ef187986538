#include "mxmoe/placement.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace mxmoe {

ExpertRange contiguous_expert_range(int num_experts, int ep_size, int ep_rank) {
  if (num_experts < 0 || ep_size < 1 || ep_rank < 0 || ep_rank >= ep_size)
    throw std::invalid_argument("expert range: need num_experts >= 0, ep_size >= 1 and 0 <= "
                                "ep_rank < ep_size; got num_experts=" +
                                std::to_string(num_experts) + ", ep_size=" +
                                std::to_string(ep_size) + ", ep_rank=" + std::to_string(ep_rank));
  const auto split = [&](int r) {
    return static_cast<int>(static_cast<std::int64_t>(r) * num_experts / ep_size);
  };
  return {split(ep_rank), split(ep_rank + 1)};
}

}  // namespace mxmoe
