// Files the way mxmoe reads and writes them (docs/RELIABILITY.md):
// - reading: only regular files. A FIFO, a device (/dev/zero) or a directory is an error at
//   once, never a read that blocks or never ends; documents have a size cap.
// - writing: whole or not at all. Bytes go to a temporary file in the target's directory,
//   which is flushed to disk (fsync) and renamed over the target only when complete, so a
//   failed write (disk full, `ulimit -f`, a signal) leaves any existing file byte-identical.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mxmoe::files {

// The most bytes a JSON document read from a file may have (config.json, an index, a
// hardware probe, a deployment): 64 MiB, far above any real one.
inline constexpr std::uint64_t kMaxJsonBytes = std::uint64_t{64} << 20;

// A file that cannot be read or written; the message names the path and the OS reason.
class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A write stopped by its cancel check (AtomicFile::set_cancel_check: a signal in the command
// line): the temporary is removed, the target untouched.
class WriteCancelled : public FileError {
 public:
  using FileError::FileError;
};

// What a file that is not a regular one is, for messages: "a FIFO", "a directory", "a
// character device", ... (MODE: stat's st_mode).
const char* file_kind(unsigned mode);

// Opens PATH read-only after checking it is a regular file (symlinks followed). Opening is
// non-blocking, so a FIFO is refused instead of waiting for a writer. Returns the file
// descriptor and its size; std::nullopt with `error` set ("PATH: not a regular file (a FIFO)").
struct OpenedFile {
  int fd = -1;
  std::uint64_t size = 0;
};
std::optional<OpenedFile> try_open_regular_file(const std::string& path, std::string& error);

// The whole of a regular file of at most max_bytes; std::nullopt with `error` set otherwise.
std::optional<std::string> try_read_regular_file(const std::string& path, std::uint64_t max_bytes,
                                                 std::string& error);

// try_read_regular_file, throwing Error(message). Error is the caller's class (LoadError for
// checkpoint files, std::invalid_argument for a file named on the command line).
template <class Error = FileError>
std::string read_regular_file(const std::string& path, std::uint64_t max_bytes = kMaxJsonBytes) {
  std::string error;
  std::optional<std::string> text = try_read_regular_file(path, max_bytes, error);
  if (!text) throw Error(error);
  return std::move(*text);
}

// Writes a file whole or not at all (see the top of this header). Create it, write() any
// number of times, then commit(); destroying it uncommitted removes the temporary file and
// leaves the target untouched. A target that exists and is not a regular file (/dev/stdout,
// a FIFO) is written directly: there is nothing to keep. A symlink is followed: the file it
// points to is replaced, the link stays. Throws FileError naming the path and the OS reason.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Optional: polled between the pieces of a write (every 8 MiB) and before the commit's
  // flush and rename; once it says true, write() and commit() throw WriteCancelled (and the
  // destructor removes the temporary), so a Ctrl-C during a gigabyte write ends it in
  // milliseconds and leaves the target as it was.
  void set_cancel_check(std::function<bool()> check) { cancelled_ = std::move(check); }
  void write(const void* data, std::size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  void commit();
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;    // as given, for messages
  std::string target_;  // what is replaced (symlinks resolved)
  std::string temp_;    // "" when writing directly
  int fd_ = -1;
  bool committed_ = false;
  std::function<bool()> cancelled_;
  void throw_if_cancelled() const;
};

// A directory written whole or not at all: files go into a temporary sibling directory
// (.NAME.mxmoe-tmp-PID-N beside the target), commit() flushes it and renames it into place.
// With replace_existing, an existing target directory is swapped out in one step
// (renameat2 RENAME_EXCHANGE; two renames where the file system lacks it) and deleted, so no
// old file survives beside the new ones. Destroyed uncommitted (an error, a cancellation),
// the temporary directory is deleted and the target is untouched. Leftovers of a process that
// was killed (SIGKILL, power loss) are deleted by the next AtomicDirectory of the same target.
class AtomicDirectory {
 public:
  explicit AtomicDirectory(std::string target);
  ~AtomicDirectory();
  AtomicDirectory(const AtomicDirectory&) = delete;
  AtomicDirectory& operator=(const AtomicDirectory&) = delete;

  const std::string& path() const noexcept { return temp_; }  // where to write
  void commit(bool replace_existing);

 private:
  std::string target_, temp_;
  bool committed_ = false;
};

// AtomicFile of one piece of text.
void write_file_atomically(const std::string& path, std::string_view contents);

// Fails fast (milliseconds, before any work) when PATH could not be written: its directory
// is missing or not writable, or PATH is a directory. Creates and removes a temporary file
// in the directory, exactly as AtomicFile will. Throws FileError: "cannot create y.npy:
// Permission denied".
void check_can_create(const std::string& path);

// What a command reads (a flag's file, a checkpoint's files, the current directory), for
// refusing an output that would overwrite or delete it (docs/RELIABILITY.md).
struct CommandInput {
  std::string what;  // for messages: "--input x.npy", "config.json of --model ckpt"
  std::string path;
};

// The input that writing OUTPUT would destroy: one that is the same file (device and inode,
// so symlinks and hard links count; the resolved path where a file does not exist yet) or,
// when OUTPUT is a directory (it is replaced whole), one that lies inside it. std::nullopt
// when there is none.
std::optional<CommandInput> input_destroyed_by(const std::string& output,
                                               const std::vector<CommandInput>& inputs);

// PATH when it holds only printable characters, else with each control byte as \xNN: a
// path echoed in a message cannot move the cursor or rewrite the terminal.
std::string printable(std::string_view path);

// fsync of a directory, so a rename inside it survives a crash. Throws FileError.
void sync_directory(const std::string& dir);

}  // namespace mxmoe::files
