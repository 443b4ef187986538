// The reference backend's compute: plain C++, no intrinsics. Each expert row is
// dequantized with the scalar MXFP4 decoder and dotted with every token routed to the
// expert in double (base/dot.hpp), rounded once to float. Work is split over
// (expert, output-row tile) so a reduction is never split: the bits of a slot's output
// depend only on its token's input and its expert, not on the batch or the thread count.
#pragma once

#include "backends/kernel.hpp"
#include "mxmoe/deployment.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::reference {

class ReferenceKernel final : public ExpertKernel {
 public:
  ReferenceKernel(const Deployment& d, const LayerWeights& w);
  std::size_t workspace_bytes(std::int64_t rows, std::int64_t slots,
                              int threads) const noexcept override;
  void run(const ExpertForward& f) const noexcept override;
  std::size_t packed_bytes() const noexcept override { return 0; }

 private:
  struct Layout;  // where each buffer lives in the workspace
  Layout layout(std::int64_t rows, std::int64_t slots, int threads) const noexcept;

  LayerSpec spec_;
  ActivationFormat format_;
  Mxfp4View w1_, w2_;
  DenseView b1_, b2_;
};

}  // namespace mxmoe::reference
