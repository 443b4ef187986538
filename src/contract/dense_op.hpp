// What a dense kernel is asked (the Op of its Candidate<DenseOp>, contract/backend.hpp): one
// linear layer y = x . W^T of a whole model (src/backends/dense), its weights' shape and
// element type, the mode it runs in and the Hardware it runs on. Everything a dense kernel's
// check() and estimate_us() may read; nothing about the values.
#pragma once

#include <cstdint>
#include <string_view>

#include "mxmoe/element_type.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe::dense {

// as_published: W read in place (f32 or bf16), f32 activations and accumulation
// (dense_fp32_lanes16); as_published_bf16: bf16 W read in place, activations rounded to bf16,
// f32 accumulation (dense_bf16_pairs16, vdpbf16ps's arithmetic); compact_int8: W quantized at
// load to int8 codes + an f32 scale per 32-block (dense_int8_rows16); compact_int4: to 4-bit
// codes + a bf16 scale per 32-block (dense_int4_rows16).
// src/backends/dense/dense_linear.hpp says more.
enum class DenseMode : std::uint8_t { as_published, as_published_bf16, compact_int8, compact_int4 };
constexpr std::string_view to_string(DenseMode mode) noexcept {
  switch (mode) {
    case DenseMode::as_published:
      return "as_published";
    case DenseMode::as_published_bf16:
      return "as_published_bf16";
    case DenseMode::compact_int8:
      return "compact_int8";
    case DenseMode::compact_int4:
      return "compact_int4";
  }
  return "?";
}
// Whether MODE quantizes W at load (the Linear owns a compact copy; the published bytes are not
// read again).
constexpr bool is_compact(DenseMode mode) noexcept {
  return mode == DenseMode::compact_int8 || mode == DenseMode::compact_int4;
}

struct DenseOp {
  std::int64_t out = 0, in = 0;             // W is [out, in]
  ElementType element = ElementType::bf16;  // of W as published
  DenseMode mode = DenseMode::as_published;
  Hardware hardware;  // judged as the machine it describes (a capped or replayed one too)
};

}  // namespace mxmoe::dense
