// `mxmoe info --model DIR`: what a checkpoint directory holds (owned by the io room).
#pragma once

#include <string>

namespace mxmoe::cli {

// Prints the checkpoint summary (text or JSON) to stdout; returns an exit code. With json and
// hardware_json (a Hardware's to_json text), the probe goes in as "hardware" so the output
// stays one JSON document.
int info_model(const std::string& dir, bool json, const std::string* hardware_json = nullptr);

}  // namespace mxmoe::cli
