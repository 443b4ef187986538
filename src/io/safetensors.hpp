// safetensors files: a strict reader over mmap (views, never copies), a writer, and the
// sharded index (`model.safetensors.index.json`). Every rule of the reference format is
// enforced; each violation is a LoadError naming the file, the tensor and the numbers.
// Rules and error classes: docs/CHECKPOINTS.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/element_type.hpp"

namespace mxmoe {

// The dtypes a safetensors file names (the file format's own list, integer types included);
// element_type() says which of them is one of mxmoe's element types.
enum class StDtype : std::uint8_t {
  BOOL,
  U8,
  I8,
  I16,
  U16,
  I32,
  U32,
  I64,
  U64,
  F4,
  F6_E2M3,
  F6_E3M2,
  F8_E4M3,
  F8_E5M2,
  F8_E8M0,
  F16,
  BF16,
  F32,
  F64,
  C64,
};
std::string_view to_string(StDtype) noexcept;
std::optional<StDtype> parse_st_dtype(std::string_view) noexcept;
int dtype_bits(StDtype) noexcept;  // 4 for F4, 6 for F6_*, 8 for U8, ...
// The element type a tensor of this dtype holds: F32 -> f32, BF16 -> bf16, F8_E4M3 -> fp8_e4m3;
// nullopt for every other dtype. No one dtype is mxfp4: an MXFP4 weight is two tensors, E2M1
// codes (U8, I8 or F4) and E8M0 scales (U8 or F8_E8M0), as each layout names them. Every
// checkpoint reader maps a tensor's dtype through this.
std::optional<ElementType> element_type(StDtype) noexcept;

struct TensorInfo {
  std::string name;
  StDtype dtype = StDtype::U8;
  std::vector<std::uint64_t> shape;  // empty for a 0-rank (scalar) tensor
  std::uint64_t begin = 0, end = 0;  // byte range in the data buffer, end exclusive
  std::uint64_t bytes() const noexcept { return end - begin; }
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;              // sorted by data offset
  std::map<std::string, std::string> metadata;  // "__metadata__"
  std::uint64_t data_start = 0;                 // 8 + header length
};

// Parses and validates a whole file image (header + data buffer) held in memory; LABEL
// names the file in errors. The fuzz target calls this directly.
SafetensorsHeader parse_safetensors(std::span<const std::uint8_t> file, const std::string& label);

// A validated, memory-mapped safetensors file. Movable; views stay valid while it lives.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);  // throws LoadError
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;

  const std::string& path() const noexcept;
  const SafetensorsHeader& header() const noexcept;
  const TensorInfo* find(std::string_view name) const noexcept;  // nullptr if absent
  std::span<const std::uint8_t> data(const TensorInfo& tensor) const noexcept;
  std::uint64_t file_size() const noexcept;
  // Drops this process's resident pages of the whole pages inside SPAN when SPAN lies in this
  // file's mapping (true), for bytes that a packed copy replaced; they stay readable (read
  // back from the file). False, with nothing done, for any other span.
  bool drop_resident(std::span<const std::uint8_t> span) const noexcept;

 private:
  struct Impl;
  explicit SafetensorsFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct TensorToWrite {
  std::string name;
  StDtype dtype = StDtype::U8;
  std::vector<std::uint64_t> shape;
  std::span<const std::uint8_t> data;  // exactly shape x dtype bytes
};

// Writes a safetensors file (header padded with spaces to a multiple of 8 bytes; tensors in
// the given order), whole or not at all (temporary file + rename). Throws
// std::invalid_argument on a duplicate/reserved name or a size mismatch, a std::runtime_error
// naming the OS reason on I/O failure.
void write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

// `model.safetensors.index.json`.
struct SafetensorsIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::optional<std::uint64_t> total_size;        // metadata.total_size when present
};
// Parses and validates the index text: weight_map required, values plain file names (no
// absolute path, no separator, no "." or ".."). LABEL names the file in errors.
SafetensorsIndex parse_safetensors_index(std::string_view json_text, const std::string& label);
// True when NAME may be a shard: a plain file name in the checkpoint directory.
bool is_plain_file_name(std::string_view name) noexcept;

}  // namespace mxmoe
