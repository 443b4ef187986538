// The token tiling of the integer classes' 16-row GEMMs, written once for every kernel folder
// (no intrinsics: each folder's object compiles its own copy, internal linkage as the rest of
// the kernel headers). tile.template operator()<N>(t0) runs the N tokens from t0: tiles of
// Largest (8 on ymm, 4 on 128-bit NEON, where 8 tokens' accumulators do not fit the 32
// registers), then of 4, then one tile of the 1-3 left. Each block is decoded once per tile.
#pragma once

#include <cstddef>

namespace mxmoe::int8_kernels {
namespace {

template <std::size_t Largest, class Tile>
__attribute__((always_inline)) inline void for_token_tiles(int tokens, Tile&& tile) {
  static_assert(Largest == 4 || Largest == 8);
  int t = 0;
  if constexpr (Largest == 8)
    for (; t + 8 <= tokens; t += 8) tile.template operator()<8>(t);
  for (; t + 4 <= tokens; t += 4) tile.template operator()<4>(t);
  switch (tokens - t) {
    case 3:
      tile.template operator()<3>(t);
      break;
    case 2:
      tile.template operator()<2>(t);
      break;
    case 1:
      tile.template operator()<1>(t);
      break;
    default:
      break;
  }
}

}  // namespace
}  // namespace mxmoe::int8_kernels
