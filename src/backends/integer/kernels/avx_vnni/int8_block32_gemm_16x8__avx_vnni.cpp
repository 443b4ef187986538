// The AVX-VNNI form of the ymm int8 GEMM (int8_ymm.hpp): VEX vpdpbusd instead of vpmaddubsw +
// vpmaddwd, the same bits. The quantizer and the GLU come from kernels/avx2/.
#include "backends/integer/int8_kernels.hpp"
#include "backends/integer/kernels/int8_ymm.hpp"

namespace mxmoe::int8_kernels {

void int8_block32_gemm_16x8__avx_vnni(const std::uint8_t* group, int blocks, const QuantRows& x,
                                      int tokens, float* out, std::int64_t out_stride) noexcept {
  gemm16_ymm<VnniDot>(group, blocks, x, tokens, out, out_stride);
}

}  // namespace mxmoe::int8_kernels
