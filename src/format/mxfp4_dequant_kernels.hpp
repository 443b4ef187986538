// The MXFP4 row decoders: the portable one (the scalar reference behind dequantize_mxfp4)
// and the per-ISA ones behind dequantize_mxfp4_fast. Declared here (internal to the
// project) so that tests can check every variant the host can run, not only the one the
// dispatcher picks. All produce the scalar decoder's bits: E2M1 value * E8M0 scale, one
// IEEE float32 multiply per element.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mxmoe::format_detail {

// Decodes `blocks` blocks: packed[16 * blocks], scales[blocks] -> out[32 * blocks].
using Mxfp4DequantFn = void (*)(const std::uint8_t* packed, const std::uint8_t* scales,
                                std::size_t blocks, float* out);

void dequantize_mxfp4_rows_portable(const std::uint8_t* packed, const std::uint8_t* scales,
                                    std::size_t blocks, float* out) noexcept;
// Call only where the CPU (and OS) support the ISA: see cpu_has_avx2 / cpu_has_avx512.
void dequantize_mxfp4_rows_avx2(const std::uint8_t* packed, const std::uint8_t* scales,
                                std::size_t blocks, float* out) noexcept;
void dequantize_mxfp4_rows_avx512(const std::uint8_t* packed, const std::uint8_t* scales,
                                  std::size_t blocks, float* out) noexcept;

bool cpu_has_avx2() noexcept;    // AVX2 + FMA, OS-enabled
bool cpu_has_avx512() noexcept;  // AVX-512 F, OS-enabled

}  // namespace mxmoe::format_detail
