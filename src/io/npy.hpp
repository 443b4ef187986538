// .npy files (NumPy format 1.0/2.0/3.0), C order, little-endian float32 for the layer's
// inputs and outputs. Malformed or truncated files throw LoadError naming the file and what
// is wrong; only regular files are read (a FIFO or a device is refused at once).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace mxmoe {

struct NpyArray {
  std::vector<std::int64_t> shape;
  std::vector<float>
      data;  // converted to float32 (from '<f4', '<f2', or bfloat16 '<u2' when asked)
};

// The most dimensions a .npy shape may have (NumPy's own limit is 64).
inline constexpr std::size_t kMaxNpyRank = 32;

// Reads a float32 array ('<f4'). Also accepts '<f2' (float16); bfloat16 stored as '<u2'
// only when allow_bf16_as_u16 is set.
NpyArray read_npy(const std::string& path, bool allow_bf16_as_u16 = false);
// Integer arrays (token ids): '<i4' or '<i8', with the same strictness as read_npy.
struct NpyInts {
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> data;
};
NpyInts read_npy_ints(const std::string& path);
// The same on a file image in memory; LABEL names it in errors (the fuzz target calls this).
NpyArray parse_npy(std::span<const std::uint8_t> file, const std::string& label,
                   bool allow_bf16_as_u16 = false);
// Writes version 1.0 '<f4', whole or not at all (temporary file + rename): a failed write
// leaves an existing file untouched. Throws files::FileError naming the OS reason.
void write_npy(const std::string& path, std::span<const float> data,
               std::span<const std::int64_t> shape);
// The same, asking CANCELLED between 8 MiB pieces and before the rename (the command line's
// Ctrl-C): once it says true, the temporary is removed, the file left as it was, and a
// std::runtime_error ("PATH: the write was interrupted; ...") thrown.
void write_npy(const std::string& path, std::span<const float> data,
               std::span<const std::int64_t> shape, const std::function<bool()>& cancelled);

}  // namespace mxmoe
