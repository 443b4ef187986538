// `mxmoe info --model DIR`: what a checkpoint directory holds (owned by the io room).
#pragma once

#include <string>

namespace mxmoe::cli {

// Prints the checkpoint summary (text or JSON) to stdout; returns an exit code.
int info_model(const std::string& dir, bool json);

}  // namespace mxmoe::cli
