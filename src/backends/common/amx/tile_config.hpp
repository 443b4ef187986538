// LDTILECFG for the AMX kernels of this folder (include only from kernels/*.cpp, compiled
// with the AMX flags). Internal linkage, like every inline helper shared between kernel TUs.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace mxmoe::amx_tiles {
namespace {

struct TileShape {
  std::uint8_t rows;
  std::uint16_t colsb;  // bytes per row
};

// Palette 1 with tiles 0..count-1 shaped as given (the others unused).
inline void load_tile_config(const TileShape* shapes, int count) noexcept {
  struct alignas(64) TileConfig {
    std::uint8_t palette_id;
    std::uint8_t start_row;
    std::uint8_t reserved[14];
    std::uint16_t colsb[16];
    std::uint8_t rows[16];
  } config;
  std::memset(&config, 0, sizeof(config));
  config.palette_id = 1;
  for (int t = 0; t < count; ++t) {
    config.rows[t] = shapes[t].rows;
    config.colsb[t] = shapes[t].colsb;
  }
  // GCC 12's _tile_loadconfig tells the compiler it reads only 8 bytes of the config, so the
  // stores above are dropped as dead without this barrier (observed: rows/colsb left zero).
  __asm__ volatile("" : : "r"(&config) : "memory");
  _tile_loadconfig(&config);
}

}  // namespace
}  // namespace mxmoe::amx_tiles
