// .npy files (NumPy format 1.0/2.0/3.0), C order, little-endian float32 for the layer's
// inputs and outputs. Malformed or truncated files throw LoadError-like std::runtime_error
// naming the file and what is wrong.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mxmoe/export.h"

namespace mxmoe {

struct MXMOE_API NpyArray {
  std::vector<std::int64_t> shape;
  std::vector<float>
      data;  // converted to float32 (from '<f4', '<f2', or bfloat16 '<u2' when asked)
};

// Reads a float32 array ('<f4'). Also accepts '<f2' (float16); bfloat16 stored as '<u2'
// only when allow_bf16_as_u16 is set.
MXMOE_API NpyArray read_npy(const std::string& path, bool allow_bf16_as_u16 = false);
MXMOE_API void write_npy(const std::string& path, std::span<const float> data,
                         std::span<const std::int64_t> shape);

}  // namespace mxmoe
