// `mxmoe synth --full`: the whole model of produce/full_model.hpp written as a sharded
// checkpoint, tensor by tensor in pieces of bounded size, with random values drawn per piece
// (a pure function of the seed, the tensor and the offset: the bytes do not depend on the
// piece size or the number of threads).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "mxmoe/generate.hpp"
#include "mxmoe/layer_spec.hpp"

namespace mxmoe::produce {

// What generate_checkpoint does with options.full (mxmoe/generate.hpp).
void write_full_checkpoint(const std::string& out, const LayerSpec& spec,
                           const GenerateOptions& options);
std::uint64_t full_checkpoint_bytes(const LayerSpec& spec, const GenerateOptions& options);

// The poll of a generating CheckpointDirectoryWriter: throws GenerateCancelled, saying what
// became of OUT, once `cancelled` returns true.
std::function<void()> generate_poll(std::function<bool()> cancelled, const std::string& out,
                                    bool out_existed);

}  // namespace mxmoe::produce
