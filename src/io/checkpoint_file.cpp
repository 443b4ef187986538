#include "io/checkpoint_file.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "mxmoe/checkpoint.hpp"
#include "mxmoe/safetensors.hpp"

namespace mxmoe::io {

std::string checkpoint_file(const std::string& dir, std::string_view name,
                            std::string_view named_by) {
  const std::string by = named_by.empty() ? dir : std::string(named_by);
  if (!is_plain_file_name(name))
    throw LoadError(by + ": \"" + std::string(name) +
                    "\" is not a plain file name in the checkpoint directory (no path "
                    "separators, no \".\" or \"..\")");
  const std::string path = dir + "/" + std::string(name);
  struct stat link {};
  if (::lstat(path.c_str(), &link) != 0)
    throw LoadError(named_by.empty() ? path + ": missing"
                                     : by + ": \"" + std::string(name) + "\" does not exist");
  struct stat target {};
  if (::stat(path.c_str(), &target) != 0)
    throw LoadError(path + ": a symbolic link that cannot be followed (" + std::strerror(errno) +
                    ")");
  if (!S_ISREG(target.st_mode))
    throw LoadError(path + ": not a regular file" +
                    (S_ISDIR(target.st_mode) ? std::string(" (a directory)") : std::string()));
  return path;
}

bool checkpoint_entry_exists(const std::string& dir, std::string_view name) {
  struct stat st {};
  return ::lstat((dir + "/" + std::string(name)).c_str(), &st) == 0;
}

}  // namespace mxmoe::io
