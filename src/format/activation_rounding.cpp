#include "format/activation_rounding.hpp"

#include <algorithm>
#include <cstdint>

#include "mxmoe/format.hpp"

namespace mxmoe {

std::size_t rounding_scratch_bytes(std::size_t n) noexcept {
  // Block scales (4-byte floats for int8, bytes for mxfp8) first, then one code per element.
  return (n / kMxBlock) * sizeof(float) + n;
}

void round_activations(ActivationFormat f, std::span<const float> in, std::span<float> out,
                       std::byte* scratch) {
  const std::size_t n = in.size();
  const std::size_t blocks = n / kMxBlock;
  switch (f) {
    case ActivationFormat::f32:
      if (out.data() != in.data()) std::copy(in.begin(), in.end(), out.begin());
      return;
    case ActivationFormat::bf16:
      for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(in[i]));
      return;
    case ActivationFormat::int8: {
      std::span<float> d(reinterpret_cast<float*>(scratch), blocks);
      std::span<std::int8_t> q(reinterpret_cast<std::int8_t*>(scratch + blocks * sizeof(float)), n);
      quantize_int8_block32(in, q, d);
      dequantize_int8_block32(q, d, out);
      return;
    }
    case ActivationFormat::mxfp8: {
      std::span<std::uint8_t> scales(reinterpret_cast<std::uint8_t*>(scratch), blocks);
      std::span<std::uint8_t> codes(
          reinterpret_cast<std::uint8_t*>(scratch + blocks * sizeof(float)), n);
      quantize_mxfp8(in, ScaleRule::round_up, codes, scales);
      dequantize_mxfp8(codes, scales, out);
      return;
    }
  }
}

}  // namespace mxmoe
