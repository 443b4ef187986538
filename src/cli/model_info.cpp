// PLACEHOLDER until the checkpoint issue lands.
#include "cli/model_info.hpp"

#include <stdexcept>

namespace mxmoe::cli {

int info_model(const std::string& dir, bool) {
  throw std::runtime_error("reading checkpoints is not built yet: " + dir);
}

}  // namespace mxmoe::cli
