// The one safety rule for every file of a checkpoint directory: config.json,
// model.safetensors, model.safetensors.index.json and each shard the index names.
//   1. The name is a plain relative file name: not empty, no '/', '\', NUL, "." or "..".
//   2. DIR/NAME may be a symlink and is followed, as Hugging Face does: its hub cache links
//      snapshots/<rev>/NAME to ../../blobs/<hash>. The directory's owner placed the links.
//   3. What it resolves to must be a regular file (not a directory, FIFO or device).
// Opening re-checks 3 on the open descriptor (files::try_open_regular_file), so a file
// swapped after this check is still refused. docs/CHECKPOINTS.md states the rule.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mxmoe::io {

// DIR/NAME after checking rules 1-3. Throws LoadError naming the file, NAMED_BY (the index,
// for a shard; "" otherwise) and what is wrong.
std::string checkpoint_file(const std::string& dir, std::string_view name,
                            std::string_view named_by = "");

// True when DIR/NAME exists as a directory entry (a dangling link counts: opening it then
// fails with a clear error instead of falling back to another layout).
bool checkpoint_entry_exists(const std::string& dir, std::string_view name);

// The names of the files a reader of DIR may open: config.json, model.safetensors, the index,
// the shards the index names and every other *.safetensors entry (those that exist; a broken
// index is left to the loader). For refusing an output that would overwrite one of them.
std::vector<std::string> checkpoint_file_names(const std::string& dir);

}  // namespace mxmoe::io
