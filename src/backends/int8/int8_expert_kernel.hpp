// The ExpertKernel shared by the integer-activation backends (the int8 class, and avx2_int16
// with int16 activations): weights packed once into
// 16-row groups (int8_kernels.hpp), then per forward call three parallel phases over
// (expert, 32-row tile): quantize inputs, GEMM1 + GLU + requantize, GEMM2 + bias.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/kernel.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::int8_backend {

// The kernels a backend runs (int8_kernels.hpp); every choice gives identical bits.
enum class Int8Kernels : std::uint8_t {
  avx512_vnni,  // AVX-512 quantizer, GLU and vpdpbusd GEMM (zmm)
  amx_int8,     // the same, and AMX tiles for experts with at least 16 slots
  avx2,         // AVX2 quantizer, GLU and vpmaddubsw + vpmaddwd GEMM (ymm)
  avx_vnni,     // the AVX2 quantizer and GLU, VEX vpdpbusd GEMM (ymm)
  neon_dotprod, // aarch64: Advanced SIMD quantizer and GLU, sdot GEMM
  neon_i8mm,    // the same quantizer and GLU, smmla GEMM (I8MM)
  sve,          // the same quantizer and GLU, SVE sdot GEMM (any vector length)
};

// The caller made sure the CPU (and for AMX the OS permission) allows the instructions.
// Throws std::invalid_argument when the weights disagree with spec.
std::unique_ptr<ExpertKernel> make_int8_expert_kernel(const LayerSpec& spec,
                                                      const LayerWeights& weights,
                                                      Int8Kernels kernels);

// The int16 class (int16_kernels.hpp): the same driver and packing, bf16 activations as
// int16 per 32-block, exact int32 block dots: vpmaddwd with AVX2 + FMA + F16C (avx2_int16),
// smlal with Advanced SIMD (neon_int16).
enum class Int16Kernels : std::uint8_t { avx2, neon };
std::unique_ptr<ExpertKernel> make_int16_expert_kernel(const LayerSpec& spec,
                                                       const LayerWeights& weights,
                                                       Int16Kernels kernels);

}  // namespace mxmoe::int8_backend
