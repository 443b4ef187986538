#include "io/tensor_set.hpp"

#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <memory>

#include "io/mapped_file.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe::io {

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string real_path(const std::string& path) {
  std::unique_ptr<char, decltype(&std::free)> resolved(::realpath(path.c_str(), nullptr),
                                                       &std::free);
  if (!resolved) throw LoadError(path + ": cannot resolve the path (missing or a broken link)");
  return resolved.get();
}

// The shard must stay inside the checkpoint directory even through symlinks.
std::string checked_shard_path(const std::string& dir, const std::string& real_dir,
                               const std::string& shard, const std::string& index_path) {
  if (!is_plain_file_name(shard))
    throw LoadError(index_path + ": shard \"" + shard + "\" is not a plain file name");
  const std::string path = dir + "/" + shard;
  if (!exists(path)) throw LoadError(index_path + ": shard \"" + shard + "\" does not exist");
  const std::string target = real_path(path);
  if (target.compare(0, real_dir.size() + 1, real_dir + "/") != 0)
    throw LoadError(index_path + ": shard \"" + shard + "\" resolves to " + target +
                    ", outside the checkpoint directory " + real_dir);
  return path;
}

}  // namespace

TensorSet TensorSet::open_dir(const std::string& dir) {
  TensorSet set;
  const std::string single = dir + "/" + kSingleFile;
  const std::string index_path = dir + "/" + kIndexFile;
  if (exists(single)) {
    set.files_.reserve(1);
    set.files_.push_back(SafetensorsFile::open(single));
    for (const TensorInfo& t : set.files_[0].header().tensors)
      set.refs_.emplace(t.name, TensorRef{&set.files_[0], &t});
    return set;
  }
  if (!exists(index_path)) throw LoadError(dir + ": no " + kSingleFile + " and no " + kIndexFile);

  set.sharded_ = true;
  const SafetensorsIndex index = parse_safetensors_index(read_text_file(index_path), index_path);
  const std::string real_dir = real_path(dir);
  std::map<std::string, std::size_t> shard_slot;
  for (const auto& [tensor, shard] : index.weight_map) shard_slot.emplace(shard, 0);
  set.files_.reserve(shard_slot.size());
  for (auto& [shard, slot] : shard_slot) {
    slot = set.files_.size();
    set.files_.push_back(
        SafetensorsFile::open(checked_shard_path(dir, real_dir, shard, index_path)));
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

}  // namespace mxmoe::io
