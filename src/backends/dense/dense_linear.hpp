// Dense linear layers of a whole model (attention projections, the LM head, a dense MLP):
//   y[m, o] = sum_i x[m, i] * W[o, i] (+ bias[o])
// with W as published ([out, in] row-major, f32 or bf16), read in place from the caller's
// memory (a checkpoint's mapping), f32 activations and f32 accumulation.
//
// Batch invariance: an output's bits depend only on its row of x, its weight row and the
// kernel's numerics class, never on m, the row's position in the batch or the thread count
// (work is split over output rows, never over the input dimension; backends/common/dense_dot.hpp
// gives the order of the sum).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/common/dense_dot.hpp"
#include "mxmoe/element_type.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe {
class ThreadPool;
}

namespace mxmoe::dense {

// What one linear layer's weights are. `data` (and `bias`) must outlive the Linear.
struct LinearWeights {
  std::string name;                         // for errors: the tensor's name
  ElementType element = ElementType::bf16;  // f32 or bf16
  const void* data = nullptr;               // [out, in]
  std::int64_t out = 0, in = 0;
  const void* bias = nullptr;  // optional [out], of bias_element (f32 or bf16)
  ElementType bias_element = ElementType::f32;
};

class Linear {
 public:
  Linear() = default;
  // Checks the weights (throws std::invalid_argument naming `name`: an element type other
  // than f32/bf16, a null pointer, sizes out of range) and binds the fastest kernel HARDWARE
  // runs.
  Linear(const LinearWeights& w, const Hardware& hardware);

  // y[m, out] = x[m, in] . W^T + bias, on POOL. x and y must not overlap. noexcept: every
  // check happened at construction.
  void forward(const float* x, std::int64_t m, float* y, ThreadPool& pool) const noexcept;

  std::int64_t in() const noexcept { return w_.in; }
  std::int64_t out() const noexcept { return w_.out; }
  const LinearWeights& weights() const noexcept { return w_; }
  // The bytes one forward call reads of the weights (for bandwidth reports).
  std::size_t weight_bytes() const noexcept;
  const char* kernel_name() const noexcept { return kernel_name_; }

 private:
  LinearWeights w_;
  DenseDotFn dot_ = nullptr;
  const char* kernel_name_ = "portable";
};

}  // namespace mxmoe::dense
