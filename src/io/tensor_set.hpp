// All tensors of a checkpoint directory: one model.safetensors, or the shards named by
// model.safetensors.index.json (every file under the rule of checkpoint_file.hpp; every
// tensor in exactly one shard and exactly where the index says).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.hpp"

namespace mxmoe::io {

struct TensorRef {
  const SafetensorsFile* file = nullptr;
  const TensorInfo* info = nullptr;
  std::span<const std::uint8_t> data() const noexcept { return file->data(*info); }
};

class TensorSet {
 public:
  // Throws LoadError naming the file and the tensor.
  static TensorSet open_dir(const std::string& dir);

  const TensorRef* find(std::string_view name) const noexcept;
  const std::map<std::string, TensorRef, std::less<>>& tensors() const noexcept { return refs_; }
  const std::vector<SafetensorsFile>& files() const noexcept { return files_; }
  bool sharded() const noexcept { return sharded_; }
  std::uint64_t tensor_bytes() const noexcept;
  // The guarded mappings of the files (base/mapped_reads.hpp): a read inside
  // mapped_reads::read_guarded(mapped_slots(), ...) of a page a file lost is a LoadError
  // naming the file, not a bus error.
  std::vector<int> mapped_slots() const;

 private:
  std::vector<SafetensorsFile> files_;  // never resized after refs_ point into it
  std::map<std::string, TensorRef, std::less<>> refs_;
  bool sharded_ = false;
};

}  // namespace mxmoe::io
