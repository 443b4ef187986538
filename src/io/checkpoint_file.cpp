#include "io/checkpoint_file.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <set>

#include "base/file.hpp"
#include "base/printable.hpp"
#include "io/safetensors.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe::io {

std::string checkpoint_file(const std::string& dir, std::string_view name,
                            std::string_view named_by) {
  const std::string by = printable(named_by.empty() ? dir : std::string(named_by));
  // A NUL would end the path early for the system calls below (and the message for C callers).
  if (dir.find('\0') != std::string::npos)
    throw LoadError(printable(dir) + ": a path cannot contain a NUL byte");
  if (!is_plain_file_name(name))
    throw LoadError(by + ": \"" + printable(name) +
                    "\" is not a plain file name in the checkpoint directory (no path "
                    "separators, no \".\" or \"..\")");
  const std::string path = dir + "/" + std::string(name);
  struct stat link {};
  if (::lstat(path.c_str(), &link) != 0) {
    // Name what is wrong: the directory itself, or the file in it.
    struct stat d {};
    if (::stat(dir.c_str(), &d) != 0)
      throw LoadError(printable(dir) + ": cannot open the checkpoint directory: " +
                      std::strerror(errno));
    if (!S_ISDIR(d.st_mode))
      throw LoadError(printable(dir) +
                      ": not a directory (a checkpoint is a directory holding config.json and "
                      "safetensors files)");
    throw LoadError(named_by.empty() ? printable(path) + ": missing"
                                     : by + ": \"" + printable(name) + "\" does not exist");
  }
  struct stat target {};
  if (::stat(path.c_str(), &target) != 0)
    throw LoadError(printable(path) + ": a symbolic link that cannot be followed (" +
                    std::strerror(errno) + ")");
  if (!S_ISREG(target.st_mode))
    throw LoadError(printable(path) + ": not a regular file (" +
                    files::file_kind(target.st_mode) + ")");
  return path;
}

bool checkpoint_entry_exists(const std::string& dir, std::string_view name) {
  struct stat st {};
  return ::lstat((dir + "/" + std::string(name)).c_str(), &st) == 0;
}

std::vector<std::string> checkpoint_file_names(const std::string& dir) {
  constexpr std::string_view kSuffix = ".safetensors";
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "config.json" || name == "model.safetensors.index.json" ||
        (name.size() > kSuffix.size() && name.ends_with(kSuffix)))
      names.insert(name);
  }
  if (names.contains("model.safetensors.index.json")) {
    std::string error;
    if (const auto text = files::try_read_regular_file(dir + "/model.safetensors.index.json",
                                                       files::kMaxJsonBytes, error)) {
      try {
        for (const auto& [tensor, shard] : parse_safetensors_index(*text, dir).weight_map)
          if (checkpoint_entry_exists(dir, shard)) names.insert(shard);
      } catch (const std::exception&) {
        // The loader names what is wrong with the index.
      }
    }
  }
  return {names.begin(), names.end()};
}

}  // namespace mxmoe::io
