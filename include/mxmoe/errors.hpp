// The error vocabulary every room may throw, declared below all of them: LoadError is what a
// malformed or changed input (a checkpoint, a hardware file, a config) becomes, in the io room
// and in the rooms below it (model's config parser, hw's hardware files, base's mapped reads).
#pragma once

#include <stdexcept>

#include "mxmoe/export.h"

namespace mxmoe {

// An input that cannot be read as what it claims to be, naming the file and what is wrong.
class MXMOE_API LoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace mxmoe
