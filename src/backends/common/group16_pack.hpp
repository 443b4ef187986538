// Expert weights packed in groups of 16 rows, shared by the tile-oriented backends
// (avx512_vnni / amx_int8 and amx_bf16). Per (group, 32-wide K block): 256 nibble bytes in the
// backend's arrangement, then the 16 rows' E8M0 scales: exactly the MXFP4 source bytes.
//
// Group order per expert:
//   W1: per 16 intermediate units jt: [gate rows of jt][up rows of jt] (2 groups), so a task
//       of 32 units owns 4 consecutive groups [gate 0-15 | up 0-15 | gate 16-31 | up 16-31];
//   W2: per 16 output rows.
// Biases are split the same way (gate_bias/up_bias per intermediate unit, b2 per output).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "backends/common/group16_layout.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::group16 {

// codes[i][k]: E2M1 code (0..15) of row i, element k of the block. Writes the 256 bytes.
using NibbleArranger = void (*)(const std::uint8_t (&codes)[kRows][32], std::uint8_t* dst);

struct PackedExperts {
  std::int64_t experts = 0, hidden = 0, inter = 0;
  std::vector<std::uint8_t> w1, w2;
  std::vector<float> gate_bias, up_bias, b2;  // zeros when the layer has no expert bias

  std::int64_t blocks_h() const noexcept { return hidden / 32; }
  std::int64_t blocks_i() const noexcept { return inter / 32; }
  std::size_t w1_group_bytes() const noexcept {
    return static_cast<std::size_t>(blocks_h()) * kBlockBytes;
  }
  std::size_t w2_group_bytes() const noexcept {
    return static_cast<std::size_t>(blocks_i()) * kBlockBytes;
  }
  // Group g (0 .. 2I/16) of expert e's W1, and group g (0 .. H/16) of its W2.
  const std::uint8_t* w1_group(std::int64_t e, std::int64_t g) const noexcept {
    return w1.data() + static_cast<std::size_t>(e * (2 * inter / kRows) + g) * w1_group_bytes();
  }
  const std::uint8_t* w2_group(std::int64_t e, std::int64_t g) const noexcept {
    return w2.data() + static_cast<std::size_t>(e * (hidden / kRows) + g) * w2_group_bytes();
  }
  std::uint8_t* w1_group(std::int64_t e, std::int64_t g) noexcept {
    return const_cast<std::uint8_t*>(std::as_const(*this).w1_group(e, g));
  }
  std::uint8_t* w2_group(std::int64_t e, std::int64_t g) noexcept {
    return const_cast<std::uint8_t*>(std::as_const(*this).w2_group(e, g));
  }
  std::size_t bytes() const noexcept {
    return w1.size() + w2.size() + sizeof(float) * (gate_bias.size() + up_bias.size() + b2.size());
  }
};

// Throws std::invalid_argument (naming `who`) when the weights disagree with spec, or when H
// or I is not a multiple of 32.
PackedExperts pack_experts(const LayerSpec& spec, const LayerWeights& w, NibbleArranger arrange,
                           const char* who);

}  // namespace mxmoe::group16
