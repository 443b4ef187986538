// LayerWeights: non-owning views of one MoE layer's tensors, typically on mmapped
// checkpoint bytes (never copied) or on a LayerStorage's buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "mxmoe/element_type.hpp"
#include "mxmoe/export.h"
#include "mxmoe/format.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/placement.hpp"

namespace mxmoe {

// A dense vector/matrix of f32 or bf16 values, row-major. Empty when data == nullptr. It
// holds no other element type: the constructor refuses one (std::invalid_argument naming it),
// and so do validate(), element_bytes() and at() for a dtype assigned afterwards.
struct MXMOE_API DenseView {
  ElementType dtype = ElementType::f32;
  const void* data = nullptr;
  std::int64_t rows = 0, cols = 0;  // a vector is rows=1 or a [E, n] matrix

  DenseView() = default;
  DenseView(ElementType dtype, const void* data, std::int64_t rows, std::int64_t cols);
  static bool holds(ElementType t) noexcept {
    return t == ElementType::f32 || t == ElementType::bf16;
  }
  bool empty() const noexcept { return data == nullptr; }
  std::size_t element_bytes() const;  // 4 or 2
  float at(std::int64_t i) const;     // flat index, converted to float
};

// Where one run of rows of one expert's MXFP4 matrix lives: `rows` rows of cols/32 blocks of
// 16 bytes (E2M1 pairs, even element in the low nibble) and rows x cols/32 E8M0 scale bytes,
// each row-major and contiguous.
struct Mxfp4Segment {
  const std::uint8_t* blocks = nullptr;
  const std::uint8_t* scales = nullptr;
};

// MXFP4 weights of all experts for one projection, stored [out, in] per expert. Each expert's
// rows are `parts` equal runs (segments) that may each live at their own address: one per
// expert for per-expert tensors, two (gate rows, up rows) when W1's halves are separate
// tensors (DeepSeek's w1 and w3), or one contiguous [experts, rows, cols/32, 16] tensor cut
// into per-expert segments (Mxfp4View::contiguous). Readers use row_blocks / row_scale (or
// segment() to scan raw bytes); nothing assumes one contiguous buffer. Copies share the
// segment table (a few pointers per expert, never the weights).
struct MXMOE_API Mxfp4View {
  std::int64_t experts = 0, rows = 0, cols = 0;
  int parts = 1;  // segments per expert; rows % parts == 0
  std::shared_ptr<const std::vector<Mxfp4Segment>> segments;  // [(first + experts) * parts]
  std::int64_t first = 0;                                     // expert 0 is table expert `first`

  // A [experts, rows, cols/32, 16] block tensor and its [experts, rows, cols/32] scales.
  static Mxfp4View contiguous(const std::uint8_t* blocks, const std::uint8_t* scales,
                              std::int64_t experts, std::int64_t rows, std::int64_t cols);
  // Per (expert, part) segments, expert-major: table[e * parts + p].
  static Mxfp4View segmented(std::vector<Mxfp4Segment> table, int parts, std::int64_t experts,
                             std::int64_t rows, std::int64_t cols);

  bool empty() const noexcept { return segments == nullptr; }
  std::int64_t row_bytes() const noexcept { return cols / 2; }
  std::int64_t row_scales() const noexcept { return cols / 32; }
  std::int64_t segment_rows() const noexcept { return rows / parts; }
  const Mxfp4Segment& segment(std::int64_t e, int part) const noexcept {
    return (*segments)[static_cast<std::size_t>((first + e) * parts + part)];
  }
  const std::uint8_t* row_blocks(std::int64_t e, std::int64_t r) const noexcept {
    const std::int64_t n = segment_rows();
    return segment(e, static_cast<int>(r / n)).blocks + (r % n) * row_bytes();
  }
  const std::uint8_t* row_scale(std::int64_t e, std::int64_t r) const noexcept {
    const std::int64_t n = segment_rows();
    return segment(e, static_cast<int>(r / n)).scales + (r % n) * row_scales();
  }
  std::size_t bytes() const noexcept {
    return static_cast<std::size_t>(experts * rows * (row_bytes() + row_scales()));
  }
  // Experts [range.begin, range.end) only, renumbered from 0 (no copy).
  Mxfp4View slice(ExpertRange range) const noexcept;
};

// One expert's dense projection [rows, cols] (the shared expert of a checkpoint that stores
// it unquantized or in FP8), in up to two row segments like Mxfp4View. Values:
//   f32 / bf16: as stored;
//   fp8_e4m3: E4M3 ("fn") code x the scale of its 128 x 128 block, the scales of a segment
//         being [ceil(segment rows / 128), ceil(cols / 128)] E8M0 bytes (exact powers of two)
//         or float32 values (scale_e8m0 = false).
// mxfp4 is not a DenseMatrixView's element (an MXFP4 shared expert is an Mxfp4View): validate()
// refuses it by name, and value() and bytes() throw std::invalid_argument.

struct MXMOE_API DenseMatrixView {
  static constexpr std::int64_t kScaleBlock = 128;
  struct Segment {
    const void* data = nullptr;
    const void* scales = nullptr;  // fp8_e4m3 only
  };
  static bool holds(ElementType t) noexcept { return t != ElementType::mxfp4; }
  ElementType element = ElementType::bf16;
  bool scale_e8m0 = true;  // fp8_e4m3: E8M0 byte scales, else float32
  int parts = 1;           // 1 or 2
  Segment segment[2];
  std::int64_t rows = 0, cols = 0;

  bool empty() const noexcept { return segment[0].data == nullptr; }
  std::int64_t segment_rows() const noexcept { return rows / parts; }
  std::int64_t scale_cols() const noexcept { return (cols + kScaleBlock - 1) / kScaleBlock; }
  std::int64_t scale_rows() const noexcept {
    return (segment_rows() + kScaleBlock - 1) / kScaleBlock;
  }
  // The weight as a double: exact for every element type and scale (an E4M3 value has 4
  // significant bits, a float32 scale 24: the product fits a double's 53).
  double value(std::int64_t r, std::int64_t c) const;
  std::size_t bytes() const;  // stored bytes, scales included
};

// DeepSeek-V4's hash routing table tid2eid [vocab, top_k]: the experts of a token id, in slot
// order. int32 or int64 as stored.
struct TokenExpertTable {
  const void* data = nullptr;
  bool int64 = false;
  std::int64_t vocab = 0, top_k = 0;
  bool empty() const noexcept { return data == nullptr; }
  std::int64_t at(std::int64_t token, std::int64_t slot) const noexcept {
    const std::int64_t i = token * top_k + slot;
    return int64 ? static_cast<const std::int64_t*>(data)[i]
                 : static_cast<const std::int32_t*>(data)[i];
  }
};

struct MXMOE_API LayerWeights {
  DenseView router_weight;         // [E, H]; may be empty when routing is given externally
  DenseView router_bias;           // [1, E] when spec.router_bias
  DenseView selection_bias;        // [1, E] when spec.routing_params.selection_bias
  TokenExpertTable token_experts;  // [vocab, top_k] when spec.routing is hash
  Mxfp4View w1;                    // [E, 2I, H] gate/up in spec.gate_up_layout
  DenseView b1;                    // [E, 2I] when spec.expert_bias
  Mxfp4View w2;                    // [E, H, I]
  DenseView b2;                    // [E, H] when spec.expert_bias
  // The shared expert (spec.shared_experts > 0; Is = shared_intermediate), in
  // spec.shared_weight_format: MXFP4 views [1, 2Is, H] / [1, H, Is], or dense [2Is, H] /
  // [H, Is] matrices for the other formats.
  Mxfp4View shared_w1;
  Mxfp4View shared_w2;
  DenseMatrixView shared_dense_w1;
  DenseMatrixView shared_dense_w2;
};

// The routed experts of `range` only: w1, w2, b1 and b2 narrowed to those experts (views,
// no copy; expert 0 of the result is range.begin). Router, selection bias and shared expert
// are kept whole: every rank routes over all experts and runs its tokens' shared expert.
// Throws std::invalid_argument unless the range lies within the views' experts.
MXMOE_API LayerWeights slice_experts(const LayerWeights& w, ExpertRange range);

// Throws std::invalid_argument naming the tensor when a view disagrees with the spec
// (shape, presence, an E8M0 scale byte 0xFF in the expert weights, a hash table entry
// outside [0, E) or repeated within a token's row).
MXMOE_API void validate(const LayerSpec& spec, const LayerWeights& w);
// The same, reading the scales of the routed experts in `scan` only (every shape is checked):
// an expert-parallel rank checks the experts it holds and touches no page of the others.
MXMOE_API void validate(const LayerSpec& spec, const LayerWeights& w,
                        std::span<const ExpertRange> scan);

// Owns the bytes of a layer generated in memory (the embedded default, tests, benchmarks).
class MXMOE_API LayerStorage {
 public:
  // Deterministic pseudo-random weights that exercise the whole format: every E2M1 code,
  // scales spread around a typical checkpoint's range, so outputs are O(1) and finite.
  static LayerStorage random(const LayerSpec& spec, std::uint64_t seed);
  // The views point into buffers_: a copy would alias the original's bytes, so only moves
  // (which keep the heap buffers where they are) are allowed.
  LayerStorage(const LayerStorage&) = delete;
  LayerStorage& operator=(const LayerStorage&) = delete;
  LayerStorage(LayerStorage&&) noexcept = default;
  LayerStorage& operator=(LayerStorage&&) noexcept = default;
  const LayerWeights& weights() const noexcept { return views_; }

 private:
  LayerStorage() = default;
  std::vector<std::vector<std::byte>> buffers_;
  LayerWeights views_;
};

}  // namespace mxmoe
