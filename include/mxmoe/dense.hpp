// mxmoe's dense linear kernels (the whole-model runtime's attention projections and LM head)
// as a public call, for an engine that wants a batch-invariant matmul on the CPU (the vLLM
// plugin's VLLM_BATCH_INVARIANT=1, docs/VLLM.md):
//   y[m, o] = sum_i x[m, i] * W[o, i] (+ bias[o])
// with W as published ([out, in] row-major, f32 or bf16, read in place), f32 activations and
// f32 accumulation in the numerics class dense_fp32_lanes16 (src/backends/dense/
// linear_kernels.hpp defines its order of operations). Batch invariant: an output's bits
// depend only on its row of x, W's row and the bias, never on m, the row's position in the
// batch or the thread count (the work is split over output rows, never over `in`), on every
// kernel of the class (AVX-512, AVX2, NEON, portable).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mxmoe/element_type.hpp"
#include "mxmoe/export.h"
#include "mxmoe/hardware.hpp"
#include "mxmoe/runtime.hpp"

namespace mxmoe {

// One matrix. `data` (and `bias`) are read in place and must outlive the DenseLinear.
struct DenseMatrix {
  std::string name;                         // for errors
  ElementType element = ElementType::bf16;  // f32 or bf16
  const void* data = nullptr;               // [out, in] row-major
  std::int64_t out = 0, in = 0;
  const void* bias = nullptr;  // optional [out], of bias_element (f32 or bf16)
  ElementType bias_element = ElementType::f32;
};

class MXMOE_API DenseLinear {
 public:
  // Checks the matrix and binds the best kernel of the class that runs on HARDWARE; throws
  // std::invalid_argument naming the matrix (another element type, a null pointer, sizes out
  // of range, or no kernel runs here: then every kernel's reasons).
  DenseLinear(const DenseMatrix& w, const Hardware& hardware);
  ~DenseLinear();
  DenseLinear(DenseLinear&&) noexcept;
  DenseLinear& operator=(DenseLinear&&) noexcept;

  // y[m, out] = x[m, in] . W^T + bias on RUNTIME's pool; x and y must not overlap.
  void forward(const float* x, std::int64_t m, float* y, Runtime& runtime) const noexcept;

  std::int64_t in() const noexcept;
  std::int64_t out() const noexcept;
  std::string kernel() const;  // "avx512_fp32", "avx2_fp32", "neon_fp32", "portable_fp32"

 private:
  struct Impl;  // the bound kernel, inside the library
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxmoe
