// The portable half of the float/bf16 SIMD backends (avx2, avx512_bf16): packs MXFP4 expert
// weights into strips of 4 rows once, and runs a forward call as
//   round x per token -> GEMM1 strips (gate/up rows of 2 intermediate indices) + b1 ->
//   activation -> round a -> GEMM2 strips + b2 -> slot_out,
// with the ISA work (strip decode, multi-token dot products) behind a StripOps table.
//
// Work is split over (expert, run of strips) only, never over K, and every (row, token) dot
// product is computed by the same code whatever the batch: results do not depend on the
// thread count or on the other tokens of the batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/float/strip_ops.hpp"
#include "backends/kernel.hpp"
#include "mxmoe/deployment.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::strip {

// One projection's weights of every expert, as strips.
struct PackedProjection {
  std::int64_t experts = 0, strips = 0, kblocks = 0;  // strips per expert
  std::size_t strip_stride = 0;                       // nibble bytes per strip: kblocks * 64
  std::unique_ptr<std::byte[]> storage;               // over-allocated for 64-byte alignment
  std::byte* base = nullptr;                          // nibbles [experts * strips][kblocks * 64]
  std::vector<std::uint8_t> scales;                   // [experts * strips][kblocks * kStripRows]
  std::vector<std::uint8_t> scale_outside;            // [experts * strips]
  std::vector<float> bias;  // [experts * strips * kStripRows], packed row order
  std::size_t bytes() const noexcept;
  PackedStrip strip(std::int64_t expert, std::int64_t s) const noexcept;
};

// row_of(s, n): the source row of row n of strip s.
enum class RowMap : std::uint8_t { identity, gate_up_interleaved, gate_up_halves };

// Packs w (all experts) and its optional bias in the given nibble order. bf16_decode: mark
// strips with a scale whose scaled elements bf16 cannot hold exactly (see PackedStrip).
PackedProjection pack_projection(const Mxfp4View& w, const DenseView& bias, RowMap map,
                                 NibbleOrder order, bool bf16_decode);

class StripKernel final : public ExpertKernel {
 public:
  StripKernel(const Deployment& d, const LayerWeights& w, const StripOps& ops);
  std::size_t workspace_bytes(std::int64_t rows, std::int64_t slots,
                              int threads) const noexcept override;
  void run(const ExpertForward& f) const noexcept override;
  std::size_t packed_bytes() const noexcept override;

 private:
  struct Layout;
  Layout layout(std::int64_t rows, std::int64_t slots) const noexcept;

  LayerSpec spec_;
  ActivationFormat format_;
  StripOps ops_;
  PackedProjection w1_, w2_;
};

}  // namespace mxmoe::strip
