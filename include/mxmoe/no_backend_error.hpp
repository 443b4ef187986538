// The error of a selection where nothing fits: NoBackendError carries the whole Selection,
// and its message (format_no_backend_message) every reason and suggestion.
#pragma once

#include <stdexcept>
#include <string>

#include "mxmoe/export.h"
#include "mxmoe/selection.hpp"

namespace mxmoe {

// Thrown by select(). what() starts with "No MXFP4 MoE backend supports the deployment
// configuration." and carries every reason and the suggestions; selection() is the
// structured report.
class MXMOE_API NoBackendError : public std::runtime_error {
 public:
  explicit NoBackendError(Selection s);
  // The same with another message (what()): why a replayed selection cannot run here, or an
  // expert-parallel group's gathered report.
  NoBackendError(Selection s, const std::string& message);
  const Selection& selection() const noexcept { return selection_; }

 private:
  Selection selection_;
};
MXMOE_API std::string format_no_backend_message(const Selection& s);

}  // namespace mxmoe
