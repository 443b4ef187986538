// The binding between the integer driver (int8_expert_kernel.cpp) and one backend's ISA
// kernels (int8_kernels.hpp, int16_kernels.hpp): a table of plain functions, filled by the
// backend's description file (*_backend.cpp) and handed to make_quant_expert_kernel. The
// driver calls only what the table names, so it is portable code and a new ISA is a new
// table, not a new branch in the driver (docs/ARCHITECTURE.md, "Binding kernels").
#pragma once

#include <cstdint>

#include "backends/integer/int8_kernels.hpp"

namespace mxmoe::int8_backend {

// AMX tiles for the experts that receive at least 16 slots (int8_kernels.hpp, "amx"). Every
// function is required.
struct AmxInt8Ops {
  void (*tile_config)() noexcept = nullptr;
  void (*tile_release)() noexcept = nullptr;
  void (*decode_group)(const std::uint8_t* group, int blocks, std::int8_t* b_tiles,
                       float* weight_scale) noexcept = nullptr;
  void (*gemm16)(const std::int8_t* b_tiles, const float* weight_scale, int blocks,
                 const int8_kernels::QuantRows& x, int tokens, float* out,
                 std::int64_t out_stride, std::int32_t* c_scratch) noexcept = nullptr;
};

// One backend's kernels; Q is the quantized activation type (int8, or int16 for the int16
// class). quantize, gemm16 and glu_quantize are required, with the contracts of their
// int8_kernels.hpp declarations; every table of a class gives the same bits.
template <class Q>
struct QuantOps {
  void (*quantize)(const float* x, std::int64_t n, Q* q, float* d,
                   std::int32_t* corr) noexcept = nullptr;
  void (*gemm16)(const std::uint8_t* group, int blocks, const int8_kernels::QuantRowsOf<Q>& x,
                 int tokens, float* out, std::int64_t out_stride) noexcept = nullptr;
  void (*glu_quantize)(const float* h, int tokens, const float* gate_bias, const float* up_bias,
                       const int8_kernels::GluParams& p, Q* q, float* d, std::int32_t* corr,
                       std::int64_t q_stride, std::int64_t s_stride) noexcept = nullptr;
  // int8 only, optional: the tiles take the experts with at least 16 slots (same bits).
  const AmxInt8Ops* amx = nullptr;
};
using Int8Ops = QuantOps<std::int8_t>;
using Int16Ops = QuantOps<std::int16_t>;

}  // namespace mxmoe::int8_backend
