// Dense linear layers of a whole model (attention projections, the LM head, a dense MLP):
//   y[m, o] = sum_i x[m, i] * W[o, i] (+ bias[o])
// Two modes, chosen by the caller:
//   - as_published: W as published ([out, in] row-major, f32 or bf16), read in place from the
//     caller's memory (a checkpoint's mapping), f32 activations, f32 accumulation: numerics
//     class dense_fp32_lanes16;
//   - compact_int8: W quantized once at construction to int8 codes with an f32 scale per
//     32-block of a row (owned by the Linear; the original bytes are not read again),
//     activations quantized per 32-block at run time, exact integer block sums accumulated
//     in f32: numerics class dense_int8_rows16. About half the bytes of bf16 per forward.
// Both classes are defined in linear_kernels.hpp; every kernel of a class gives the same bits
// (AVX-512, AVX2, NEON, portable).
//
// Batch invariance: an output's bits depend only on its row of x, its weight row and the
// numerics class, never on m, the row's position in the batch or the thread count (work is
// split over output rows, never over the input dimension).
//
// Selection: each kernel is a candidate with a name (ISA_NUMERICS), a numerics class and a
// check() that returns every reason it cannot run here (oracle Rejection records); the
// Linear binds the first accepted candidate of its mode and keeps every verdict.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backends/dense/linear_kernels.hpp"
#include "backends/kernel_isa.hpp"
#include "mxmoe/element_type.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/reason_codes.hpp"

namespace mxmoe {
class ThreadPool;
}

namespace mxmoe::dense {

// What one linear layer's weights are. `data` (and `bias`) must outlive the Linear in
// as_published mode; compact_int8 reads them only during construction.
struct LinearWeights {
  std::string name;                         // for errors: the tensor's name
  ElementType element = ElementType::bf16;  // f32 or bf16
  const void* data = nullptr;               // [out, in]
  std::int64_t out = 0, in = 0;
  const void* bias = nullptr;  // optional [out], of bias_element (f32 or bf16)
  ElementType bias_element = ElementType::f32;
};

enum class DenseMode : std::uint8_t { as_published, compact_int8 };
std::string_view to_string(DenseMode) noexcept;

struct LinearOptions {
  DenseMode mode = DenseMode::as_published;
  // compact_int8: the quantization at construction runs on this pool (nullptr: the caller).
  ThreadPool* pack_pool = nullptr;
};

// One candidate kernel's verdict for this layer on this Hardware.
struct KernelVerdict {
  std::string kernel;              // "avx512_fp32", "avx2_int8", ...
  std::string numerics_class;      // "dense_fp32_lanes16", "dense_int8_rows16"
  std::vector<Rejection> reasons;  // every reason it cannot run; empty = accepted
  bool accepted() const noexcept { return reasons.empty(); }
};

// What a Linear chose and why: every candidate of its mode, best first.
struct LinearSelection {
  DenseMode mode = DenseMode::as_published;
  std::string chosen;  // the first accepted candidate
  std::vector<KernelVerdict> candidates;
};
// A few lines for `explain`: the layer, the choice, then one line per candidate with its
// reasons.
std::string describe(const LinearSelection&, std::string_view layer_name);

// The lines of `describe` for the candidates: one a candidate (chosen, accepted or rejected),
// then one a reason.
std::string describe_verdicts(const std::vector<KernelVerdict>& candidates, std::string_view chosen);

// Every reason a kernel calling SET cannot run on HARDWARE: the set not compiled in this build,
// a feature the CPU lacks (or that MXMOE_MAX_ISA capped) or the OS denied.
std::vector<Rejection> isa_rejections(KernelIsa set, const Hardware& hardware);

// The candidates of a mode, best first, judged for these weights on HARDWARE (pure: a capped
// or replayed Hardware judges as the machine it describes).
LinearSelection judge_kernels(const LinearWeights& w, const Hardware& hardware, DenseMode mode);

class Linear {
 public:
  Linear() = default;
  // Checks the weights (throws std::invalid_argument naming `name`: an element type other
  // than f32/bf16, a null pointer, sizes out of range, or no candidate of the mode accepts
  // the layer: then every reason) and binds the first accepted kernel of the mode.
  Linear(const LinearWeights& w, const Hardware& hardware);  // as_published
  Linear(const LinearWeights& w, const Hardware& hardware, const LinearOptions& options);

  // y[m, out] = x[m, in] . W^T + bias, on POOL. x and y must not overlap. noexcept: every
  // check happened at construction. Allocates nothing.
  void forward(const float* x, std::int64_t m, float* y, ThreadPool& pool) const noexcept;

  std::int64_t in() const noexcept { return w_.in; }
  std::int64_t out() const noexcept { return w_.out; }
  const LinearWeights& weights() const noexcept { return w_; }
  DenseMode mode() const noexcept { return selection_.mode; }
  // The bytes one forward call reads of the weights (for bandwidth reports): the published
  // matrix, or the compact codes and scales.
  std::size_t weight_bytes() const noexcept;
  const char* kernel_name() const noexcept { return kernel_name_; }
  const LinearSelection& selection() const noexcept { return selection_; }

 private:
  std::int64_t rows_per_task(std::int64_t m, int threads) const noexcept;

  LinearWeights w_;
  LinearSelection selection_;
  const char* kernel_name_ = "portable_fp32";
  LinearF32Fn f32_ = nullptr;
  LinearInt8Fn int8_ = nullptr;
  std::vector<float> bias_;         // f32 copy (empty: no bias)
  std::vector<std::uint8_t> packed_;  // compact_int8: CompactWeights' groups
};

}  // namespace mxmoe::dense
