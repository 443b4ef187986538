#include "base/file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <utility>

#include "base/printable.hpp"

namespace mxmoe::files {

namespace {

std::string os_reason(int err) {
  return std::strerror(err);
}

std::string directory_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A name no other writer uses: the target's name, this process and a random tag.
std::string temp_name_for(const std::string& target) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::string dir = directory_of(target);
  std::string name = dir == "/" ? std::string() : dir;
  name += "/.";
  name += base_name_of(target);
  name += ".mxmoe-tmp-" + std::to_string(::getpid()) + "-" + std::to_string(rng() % 1000000000);
  return name;
}

// PATH with symlinks resolved when it is one (so the link survives the rename): each link of
// a chain followed, a dangling one to where it points (relative to the link's directory). A
// loop of links (loop1 -> loop2 -> loop1) is an error, never a link replaced by a file.
std::string resolve_link(const std::string& path) {
  std::string at = path;
  for (int hops = 0;; ++hops) {
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return at;
    if (hops == 40)
      throw FileError("cannot create " + printable(path) + ": " + os_reason(ELOOP) +
                      " (a loop of symbolic links)");
    char target[PATH_MAX];
    const ssize_t n = ::readlink(at.c_str(), target, sizeof target - 1);
    if (n <= 0) return at;
    const std::string t(target, static_cast<std::size_t>(n));
    at = t.front() == '/' ? t : directory_of(at) + "/" + t;
  }
}

void close_quietly(int fd) {
  if (fd >= 0) ::close(fd);
}

}  // namespace

const char* file_kind(unsigned mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

std::optional<OpenedFile> try_open_regular_file(const std::string& path, std::string& error) {
  if (path.find('\0') != std::string::npos) {  // open() would read a shorter path
    error = printable(path) + ": a path cannot contain a NUL byte";
    return std::nullopt;
  }
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    error = printable(path) + ": cannot open: " + os_reason(errno);
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    error = printable(path) + ": cannot stat: " + os_reason(errno);
    close_quietly(fd);
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    error = printable(path) + ": not a regular file (" + file_kind(st.st_mode) + ")";
    close_quietly(fd);
    return std::nullopt;
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return OpenedFile{fd, static_cast<std::uint64_t>(st.st_size)};
}

std::optional<std::string> try_read_regular_file(const std::string& path, std::uint64_t max_bytes,
                                                 std::string& error) {
  const std::optional<OpenedFile> file = try_open_regular_file(path, error);
  if (!file) return std::nullopt;
  if (file->size > max_bytes) {
    error = path + ": " + std::to_string(file->size) + " bytes, more than the " +
            std::to_string(max_bytes) + " this file may have";
    close_quietly(file->fd);
    return std::nullopt;
  }
  std::string text(static_cast<std::size_t>(file->size), '\0');
  std::size_t done = 0;
  // Reads what fstat promised; a file that grows meanwhile is cut at the cap, never unbounded.
  while (true) {
    if (done == text.size()) {
      if (text.size() >= max_bytes) break;
      text.resize(std::min<std::size_t>(static_cast<std::size_t>(max_bytes), text.size() + 4096));
    }
    const ssize_t n = ::read(file->fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = path + ": read error: " + os_reason(errno);
      close_quietly(file->fd);
      return std::nullopt;
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  close_quietly(file->fd);
  text.resize(done);
  return text;
}

namespace {
void remove_stale_siblings(const std::string& target, bool directories);
}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw FileError("cannot create a file with an empty name");
  target_ = resolve_link(path_);
  struct stat st {};
  if (::stat(target_.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      throw FileError("cannot create " + printable(path_) + ": Is a directory");
    if (!S_ISREG(st.st_mode)) {
      // /dev/stdout, /dev/null, a FIFO: nothing to keep, write straight into it.
      fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
      if (fd_ < 0) throw FileError("cannot open " + printable(path_) + ": " + os_reason(errno));
      return;
    }
  }
  remove_stale_siblings(target_, false);  // a killed writer's partial temporaries
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
    temp_ = temp_name_for(target_);
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) throw FileError("cannot create " + printable(path_) + ": " + os_reason(errno));
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  close_quietly(fd_);
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::throw_if_cancelled() const {
  if (cancelled_ && cancelled_())
    throw WriteCancelled(printable(path_) + ": the write was interrupted; the file is as it was");
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  if (committed_) throw FileError(printable(path_) + ": write after commit");
  constexpr std::size_t kPiece = std::size_t{8} << 20;
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    throw_if_cancelled();
    const ssize_t n = ::write(fd_, p, std::min(bytes, kPiece));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw FileError("cannot write " + printable(path_) + ": " + os_reason(errno));
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void AtomicFile::commit() {
  if (committed_) return;
  throw_if_cancelled();
  if (temp_.empty()) {
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0)
      throw FileError("cannot write " + printable(path_) + ": " + os_reason(errno));
    committed_ = true;
    return;
  }
  if (::fsync(fd_) != 0)
    throw FileError("cannot write " + printable(path_) + ": " + os_reason(errno));
  throw_if_cancelled();  // a signal during the flush: still nothing replaced
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0)
    throw FileError("cannot write " + printable(path_) + ": " + os_reason(errno));
  if (::rename(temp_.c_str(), target_.c_str()) != 0)
    throw FileError("cannot replace " + printable(path_) + ": " + os_reason(errno));
  committed_ = true;
  sync_directory(directory_of(target_));
}

namespace {

bool process_alive(long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

// The PID in a temporary name's suffix, exactly as temp_name_for writes it ("PID-N", both
// decimal digits only); 0 for anything else (a name a user chose that merely looks alike).
long temp_suffix_pid(const std::string& suffix) {
  const std::size_t dash = suffix.find('-');
  const auto digits = [](const std::string& s) {
    return !s.empty() && s.size() <= 18 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (dash == std::string::npos || !digits(suffix.substr(0, dash)) ||
      !digits(suffix.substr(dash + 1)))
    return 0;
  return std::strtol(suffix.c_str(), nullptr, 10);
}

// Temporary siblings of TARGET (directories, or regular files when not DIRECTORIES) left by
// processes that no longer run: only names of temp_name_for's exact form with a PID that is
// not running (never a user's folder or file that merely starts alike, never a symlink).
void remove_stale_siblings(const std::string& target, bool directories) {
  namespace fs = std::filesystem;
  std::string prefix(1, '.');  // built in steps: GCC 12 warns falsely on "." + string
  prefix += base_name_of(target);
  prefix += ".mxmoe-tmp-";
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(directory_of(target), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || e.is_symlink(ec) ||
        !(directories ? e.is_directory(ec) : e.is_regular_file(ec)))
      continue;
    const long pid = temp_suffix_pid(name.substr(prefix.size()));
    if (pid > 0 && pid != ::getpid() && !process_alive(pid)) fs::remove_all(e.path(), ec);
  }
}

}  // namespace

AtomicDirectory::AtomicDirectory(std::string target) : target_(std::move(target)) {
  while (target_.size() > 1 && target_.back() == '/') target_.pop_back();
  if (target_.empty()) throw FileError("cannot create a directory with an empty name");
  remove_stale_siblings(target_, true);
  for (int attempt = 0; attempt < 16; ++attempt) {
    temp_ = temp_name_for(target_);
    if (::mkdir(temp_.c_str(), 0777) == 0) return;
    if (errno != EEXIST) break;
  }
  throw FileError("cannot create a directory beside " + printable(target_) + ": " +
                  os_reason(errno));
}

AtomicDirectory::~AtomicDirectory() {
  if (committed_) return;
  std::error_code ec;
  std::filesystem::remove_all(temp_, ec);
}

void AtomicDirectory::commit(bool replace_existing) {
  if (committed_) return;
  sync_directory(temp_);
  struct stat st {};
  const bool exists = ::lstat(target_.c_str(), &st) == 0;
  if (exists && !replace_existing)
    throw FileError("cannot create " + printable(target_) + ": File exists");
  if (exists && !S_ISDIR(st.st_mode))
    throw FileError("cannot replace " + printable(target_) + ": it is not a directory");
  if (!exists) {
    if (::rename(temp_.c_str(), target_.c_str()) != 0)
      throw FileError("cannot create " + printable(target_) + ": " + os_reason(errno));
    committed_ = true;
  } else if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) ==
             0) {
    committed_ = true;  // temp_ now holds the old directory
  } else if (errno == EINVAL || errno == ENOSYS) {
    // No atomic exchange on this file system: move the old one aside, then the new one in.
    const std::string old = temp_name_for(target_);
    if (::rename(target_.c_str(), old.c_str()) != 0)
      throw FileError("cannot replace " + printable(target_) + ": " + os_reason(errno));
    if (::rename(temp_.c_str(), target_.c_str()) != 0) {
      const int err = errno;
      (void)::rename(old.c_str(), target_.c_str());
      throw FileError("cannot replace " + printable(target_) + ": " + os_reason(err));
    }
    committed_ = true;
    temp_ = old;
  } else {
    throw FileError("cannot replace " + printable(target_) + ": " + os_reason(errno));
  }
  sync_directory(directory_of(target_));
  std::error_code ec;
  if (exists) std::filesystem::remove_all(temp_, ec);  // the old directory
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  AtomicFile file(path);
  file.write(contents);
  file.commit();
}

void check_can_create(const std::string& path) {
  if (path.empty()) throw FileError("cannot create a file with an empty name");
  const std::string target = resolve_link(path);
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode))
      throw FileError("cannot create " + printable(path) + ": Is a directory");
    // A special file is opened only when written (a FIFO would wait for its reader here).
    if (::access(target.c_str(), W_OK) != 0)
      throw FileError("cannot open " + printable(path) + ": " + os_reason(errno));
    return;
  }
  AtomicFile probe(path);  // creates the temporary file beside the target
  (void)probe;             // destroyed uncommitted: removed again, the target untouched
}

namespace {

// PATH absolute, with every symlink of the part that exists resolved (the rest appended).
std::string resolved_path(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) return path;
  const std::filesystem::path real = std::filesystem::weakly_canonical(absolute, ec);
  return ec ? absolute.lexically_normal().string() : real.string();
}

bool same_or_inside(const std::string& path, const std::string& dir) {
  if (path == dir) return true;
  const std::string prefix = dir.back() == '/' ? dir : dir + "/";
  return path.rfind(prefix, 0) == 0;
}

}  // namespace

std::optional<CommandInput> input_destroyed_by(const std::string& output,
                                               const std::vector<CommandInput>& inputs) {
  if (output.empty()) return std::nullopt;
  struct stat out {};
  const bool exists = ::stat(output.c_str(), &out) == 0;
  const bool directory = exists && S_ISDIR(out.st_mode);
  const std::string out_real = resolved_path(output);
  for (const CommandInput& input : inputs) {
    if (input.path.empty()) continue;
    struct stat in {};
    if (exists && ::stat(input.path.c_str(), &in) == 0 && in.st_dev == out.st_dev &&
        in.st_ino == out.st_ino)
      return input;
    const std::string in_real = resolved_path(input.path);
    if (in_real == out_real || (directory && same_or_inside(in_real, out_real))) return input;
  }
  return std::nullopt;
}

std::string printable(std::string_view path) {
  std::string out;
  out.reserve(path.size());
  for (const char c : path) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      constexpr const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += c;
    }
  }
  return out;
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw FileError("cannot open directory " + dir + ": " + os_reason(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot sync a directory (EINVAL); the rename itself has happened.
  if (rc != 0 && err != EINVAL && err != EROFS)
    throw FileError("cannot sync directory " + dir + ": " + os_reason(err));
}

}  // namespace mxmoe::files
