// The one definition of the 16-row group that the int8, int16 and amx_bf16 families pack their
// weights into (group16_pack.hpp) and their ISA kernels read: per (group, 32-wide K block),
// 256 nibble bytes in the family's arrangement, then the 16 rows' E8M0 scale bytes, i.e. the
// 272 bytes of the MXFP4 source. Constants only, so ISA translation units include it too.
#pragma once

#include <cstddef>

namespace mxmoe::group16 {

inline constexpr int kRows = 16;                   // weight rows (outputs) per group
inline constexpr std::size_t kNibbleBytes = 256;   // 16 rows x 32 elements x 4 bits
inline constexpr std::size_t kBlockBytes = 272;    // nibbles + 16 scale bytes

}  // namespace mxmoe::group16
