// LayerWeights: non-owning views of one MoE layer's tensors, typically on mmapped
// checkpoint bytes (never copied) or on a LayerStorage's buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "mxmoe/export.h"
#include "mxmoe/format.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/placement.hpp"

namespace mxmoe {

enum class DType : std::uint8_t { f32, bf16 };

// A dense vector/matrix of f32 or bf16 values, row-major. Empty when data == nullptr.
struct MXMOE_API DenseView {
  DType dtype = DType::f32;
  const void* data = nullptr;
  std::int64_t rows = 0, cols = 0;  // a vector is rows=1 or a [E, n] matrix
  bool empty() const noexcept { return data == nullptr; }
  float at(std::int64_t i) const noexcept;  // flat index, converted to float
};

// MXFP4 weights of all experts for one projection, stored [out, in] per expert:
// blocks [experts, rows, cols/32, 16] bytes, scales [experts, rows, cols/32] E8M0 bytes.
struct MXMOE_API Mxfp4View {
  const std::uint8_t* blocks = nullptr;
  const std::uint8_t* scales = nullptr;
  std::int64_t experts = 0, rows = 0, cols = 0;
  bool empty() const noexcept { return blocks == nullptr; }
  std::int64_t row_bytes() const noexcept { return cols / 2; }
  std::int64_t row_scales() const noexcept { return cols / 32; }
  const std::uint8_t* row_blocks(std::int64_t e, std::int64_t r) const noexcept {
    return blocks + (e * rows + r) * row_bytes();
  }
  const std::uint8_t* row_scale(std::int64_t e, std::int64_t r) const noexcept {
    return scales + (e * rows + r) * row_scales();
  }
  std::size_t bytes() const noexcept {
    return static_cast<std::size_t>(experts * rows * (row_bytes() + row_scales()));
  }
};

struct MXMOE_API LayerWeights {
  DenseView router_weight;   // [E, H]; may be empty when routing is given externally
  DenseView router_bias;     // [1, E] when spec.router_bias
  DenseView selection_bias;  // [1, E] when spec.routing_params.selection_bias
  Mxfp4View w1;              // [E, 2I, H] gate/up in spec.gate_up_layout
  DenseView b1;              // [E, 2I] when spec.expert_bias
  Mxfp4View w2;              // [E, H, I]
  DenseView b2;              // [E, H] when spec.expert_bias
  Mxfp4View shared_w1;       // [1, 2*Is, H] when spec.shared_experts > 0 (Is = shared_intermediate)
  Mxfp4View shared_w2;       // [1, H, Is]
};

// The routed experts of `range` only: w1, w2, b1 and b2 narrowed to those experts (views,
// no copy; expert 0 of the result is range.begin). Router, selection bias and shared expert
// are kept whole: every rank routes over all experts and runs its tokens' shared expert.
// Throws std::invalid_argument unless the range lies within the views' experts.
MXMOE_API LayerWeights slice_experts(const LayerWeights& w, ExpertRange range);

// Throws std::invalid_argument naming the tensor when a view disagrees with the spec
// (shape, presence, or an E8M0 scale byte 0xFF in the expert weights).
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
