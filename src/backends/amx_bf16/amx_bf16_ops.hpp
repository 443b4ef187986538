// The binding between the amx_bf16 driver (bf16_expert_kernel.cpp) and its ISA kernels
// (bf16_amx_kernels.hpp): a table of plain functions, filled by amx_bf16_backend.cpp, as
// every family's driver takes one (docs/ARCHITECTURE.md, "Binding kernels"). Every function
// is required, with the contract of its bf16_amx_kernels.hpp declaration.
#pragma once

#include <cstdint>

#include "backends/amx_bf16/bf16_amx_kernels.hpp"

namespace mxmoe::amx_bf16_backend {

struct AmxBf16Ops {
  void (*tile_config)(int rows) noexcept = nullptr;
  void (*tile_release)() noexcept = nullptr;
  void (*round_row_to_tiles)(const float* x, int blocks, std::uint16_t* row) noexcept = nullptr;
  void (*decode_group)(const std::uint8_t* group, int blocks, bool fold, std::uint16_t* b_tiles,
                       float* block_scale) noexcept = nullptr;
  void (*gemm_pair)(const bf16_amx::GroupPair& pair, int blocks, const std::uint16_t* a,
                    std::int64_t a_tile_stride, int rows, float* out, std::int64_t out_stride,
                    float* c_scratch) noexcept = nullptr;
  void (*glu_to_bf16)(const float* h, int rows, const float* gate_bias, const float* up_bias,
                      const simd::GluParams& p, std::uint16_t* a,
                      std::int64_t a_tile_stride) noexcept = nullptr;
};

}  // namespace mxmoe::amx_bf16_backend
