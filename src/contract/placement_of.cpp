// placement_of (mxmoe/deployment.hpp): a Request's placement, in the room that owns Request.
#include <fmt/core.h>

#include <stdexcept>

#include "mxmoe/deployment.hpp"

namespace mxmoe {

Placement placement_of(const Request& request, int num_experts) {
  if (request.ep_size < 1)
    throw std::invalid_argument(fmt::format("ep_size={} (need >= 1)", request.ep_size));
  if (request.placement.empty()) return Placement::contiguous(num_experts, request.ep_size);
  if (static_cast<int>(request.placement.size()) != num_experts)
    throw std::invalid_argument(fmt::format("the placement lists {} experts, the layer has {}",
                                            request.placement.size(), num_experts));
  return Placement(request.placement, request.ep_size);
}

}  // namespace mxmoe
