// A mutable, contiguous copy of an MXFP4 view (LayerStorage's and checkpoints' bytes are
// read-only, and may live in several segments): tests corrupt or inspect these bytes and
// hand view() to the code under test.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "mxmoe/weights.hpp"

namespace mxmoe::testing {

struct Mxfp4Copy {
  std::int64_t experts = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> blocks, scales;  // [experts, rows, cols/32, 16] / [.., cols/32]

  explicit Mxfp4Copy(const Mxfp4View& v)
      : experts(v.experts),
        rows(v.rows),
        cols(v.cols),
        blocks(static_cast<std::size_t>(v.experts * v.rows * v.row_bytes())),
        scales(static_cast<std::size_t>(v.experts * v.rows * v.row_scales())) {
    for (std::int64_t e = 0; e < experts; ++e)
      for (std::int64_t r = 0; r < rows; ++r) {
        const auto row = static_cast<std::size_t>(e * rows + r);
        std::memcpy(blocks.data() + row * static_cast<std::size_t>(v.row_bytes()),
                    v.row_blocks(e, r), static_cast<std::size_t>(v.row_bytes()));
        std::memcpy(scales.data() + row * static_cast<std::size_t>(v.row_scales()),
                    v.row_scale(e, r), static_cast<std::size_t>(v.row_scales()));
      }
  }
  Mxfp4View view() const {
    return Mxfp4View::contiguous(blocks.data(), scales.data(), experts, rows, cols);
  }
};

}  // namespace mxmoe::testing
