#include "io/tensor_set.hpp"

#include <cstdint>

#include "base/mapped_reads.hpp"
#include "io/checkpoint_file.hpp"
#include "io/mapped_file.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe::io {

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

}  // namespace

TensorSet TensorSet::open_dir(const std::string& dir) {
  TensorSet set;
  if (checkpoint_entry_exists(dir, kSingleFile)) {
    set.files_.reserve(1);
    set.files_.push_back(SafetensorsFile::open(checkpoint_file(dir, kSingleFile)));
    for (const TensorInfo& t : set.files_[0].header().tensors)
      set.refs_.emplace(t.name, TensorRef{&set.files_[0], &t});
    return set;
  }
  if (!checkpoint_entry_exists(dir, kIndexFile))
    throw LoadError(dir + ": no " + kSingleFile + " and no " + kIndexFile);

  set.sharded_ = true;
  const std::string index_path = checkpoint_file(dir, kIndexFile);
  const SafetensorsIndex index = parse_safetensors_index(read_text_file(index_path), index_path);
  std::map<std::string, std::size_t> shard_slot;
  for (const auto& [tensor, shard] : index.weight_map) shard_slot.emplace(shard, 0);
  set.files_.reserve(shard_slot.size());
  for (auto& [shard, slot] : shard_slot) {
    slot = set.files_.size();
    set.files_.push_back(SafetensorsFile::open(checkpoint_file(dir, shard, index_path)));
  }
  for (const auto& [shard, slot] : shard_slot) {
    const SafetensorsFile& file = set.files_[slot];
    for (const TensorInfo& t : file.header().tensors) {
      const auto listed = index.weight_map.find(t.name);
      if (listed == index.weight_map.end())
        throw LoadError(file.path() + ": tensor \"" + t.name + "\" is not listed in " + index_path);
      if (listed->second != shard)
        throw LoadError(file.path() + ": tensor \"" + t.name + "\" is also in shard \"" + shard +
                        "\" but the index maps it to \"" + listed->second + "\"");
      const auto [it, inserted] = set.refs_.emplace(t.name, TensorRef{&file, &t});
      if (!inserted)
        throw LoadError(file.path() + ": tensor \"" + t.name + "\" is in two shards (" +
                        it->second.file->path() + ")");
    }
  }
  for (const auto& [tensor, shard] : index.weight_map)
    if (set.refs_.find(tensor) == set.refs_.end())
      throw LoadError(index_path + ": tensor \"" + tensor + "\" is listed in shard \"" + shard +
                      "\" but the shard does not contain it");
  return set;
}

const TensorRef* TensorSet::find(std::string_view name) const noexcept {
  const auto it = refs_.find(name);
  return it == refs_.end() ? nullptr : &it->second;
}

std::uint64_t TensorSet::tensor_bytes() const noexcept {
  std::uint64_t total = 0;
  for (const auto& [name, ref] : refs_) total += ref.info->bytes();
  return total;
}

std::vector<int> TensorSet::mapped_slots() const {
  std::vector<std::uintptr_t> pointers;
  for (const SafetensorsFile& file : files_)
    for (const TensorInfo& t : file.header().tensors)
      if (!file.data(t).empty()) {
        pointers.push_back(reinterpret_cast<std::uintptr_t>(file.data(t).data()));
        break;
      }
  return mapped_reads::slots_holding(pointers);
}

}  // namespace mxmoe::io
