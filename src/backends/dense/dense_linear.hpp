// Dense linear layers of a whole model (attention projections, the LM head, a dense MLP):
//   y[m, o] = sum_i x[m, i] * W[o, i] (+ bias[o])
// Four modes, chosen by the caller:
//   - as_published: W as published ([out, in] row-major, f32 or bf16), read in place from the
//     caller's memory (a checkpoint's mapping), f32 activations, f32 accumulation: numerics
//     class dense_fp32_lanes16;
//   - as_published_bf16: bf16 W read in place the same way, activations rounded to bf16,
//     f32 accumulation with vdpbf16ps's arithmetic: numerics class dense_bf16_pairs16 (twice
//     the products per instruction of the f32 class where the CPU has AVX-512 BF16);
//   - compact_int8: W quantized once at construction to int8 codes with an f32 scale per
//     32-block of a row (owned by the Linear; the original bytes are not read again),
//     activations quantized per 32-block at run time, exact integer block sums accumulated
//     in f32: numerics class dense_int8_rows16. About half the bytes of bf16 per forward;
//   - compact_int4: the same with 4-bit codes and a bf16 scale per 32-block (numerics class
//     dense_int4_rows16): about a quarter of bf16's bytes, for a step 16x as coarse.
// The classes are defined in linear_kernels.hpp; every kernel of a class gives the same bits
// (AVX-512, AVX2, NEON, portable).
//
// Batch invariance: an output's bits depend only on its row of x, its weight row and the
// numerics class, never on m, the row's position in the batch or the thread count (work is
// split over output rows, never over the input dimension).
//
// Selection: each kernel is a Candidate<DenseOp> (contract/backend.hpp, the contract every kind
// of kernel answers) with a name (ISA_NUMERICS), a numerics class, a check() that returns
// every reason it cannot run an op (Rejection records) and an estimate. This room judges
// nothing: the asker (bind_linear, src/runtime/bind_linear.hpp) has the oracle judge
// candidates(mode) (judge_each, src/oracle/judge_each.hpp) and hands the Judgement to the
// Linear, which binds the chosen kernel and keeps every verdict.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/dense/linear_kernels.hpp"
#include "backends/kernel_isa.hpp"
#include "contract/backend.hpp"
#include "contract/dense_op.hpp"
#include "contract/judgement.hpp"
#include "mxmoe/element_type.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe {
class ThreadPool;
}

namespace mxmoe::dense {

// What one linear layer's weights are. `data` (and `bias`) must outlive the Linear in
// as_published mode; the compact modes read them only during construction.
struct LinearWeights {
  std::string name;                         // for errors: the tensor's name
  ElementType element = ElementType::bf16;  // f32 or bf16
  const void* data = nullptr;               // [out, in]
  std::int64_t out = 0, in = 0;
  const void* bias = nullptr;  // optional [out], of bias_element (f32 or bf16)
  ElementType bias_element = ElementType::f32;
};

// The bytes a compact MODE stores per group block (16 rows x 32 codes and their scales).
constexpr std::int64_t compact_group_block_bytes(DenseMode mode) noexcept {
  return mode == DenseMode::compact_int4 ? kCompact4GroupBlockBytes : kCompactGroupBlockBytes;
}

// The op of layer W in MODE on HARDWARE, as the candidates are judged on it.
inline DenseOp dense_op(const LinearWeights& w, DenseMode mode, const Hardware& hardware) {
  return {.out = w.out, .in = w.in, .element = w.element, .mode = mode, .hardware = hardware};
}

// The kernels of MODE, best first (an ISA kernel before the portable one): each a
// Candidate<DenseOp> whose estimate_us() is a roofline at one row over rough per-thread rates
// that never grow down the list, so the oracle's ranking keeps this order (equal estimates
// keep it too). A kernel of another architecture is listed and says not_compiled.
std::span<const Candidate<DenseOp>* const> candidates(DenseMode mode) noexcept;

// What the oracle judged for one layer (judge_each(dense_op(...), candidates(mode))): the op,
// every kernel's mxmoe::Verdict, the chosen one and why.
using LinearSelection = Judgement<DenseOp>;

// Whether the kernel JUDGED chose runs an instruction set's code (not the portable C++ that
// defines its class, nor nothing).
bool chose_isa_kernel(const LinearSelection& judged) noexcept;

// A few lines for `explain`: the layer, the choice and why, then one line per candidate with
// its estimate or its reasons.
std::string describe(const LinearSelection&, std::string_view layer_name);

// The lines of `describe` for the candidates: one a candidate (chosen, accepted or rejected;
// with its estimate when the oracle judged it), then one a reason.
std::string describe_verdicts(const std::vector<Verdict>& candidates, std::string_view chosen);

// Every reason a kernel calling SET cannot run on HARDWARE: the set not compiled in this build,
// a feature the CPU lacks (or that MXMOE_MAX_ISA capped) or the OS denied.
std::vector<Rejection> isa_rejections(KernelIsa set, const Hardware& hardware);

class Linear {
 public:
  Linear() = default;
  // Checks the weights (throws std::invalid_argument naming `name`: an element type other
  // than f32/bf16, a null pointer, sizes out of range), then binds the kernel JUDGED chose
  // for them (throws std::invalid_argument naming `name`: when no candidate of the mode
  // accepts the layer, with every reason; when JUDGED is of another layer, names no kernel
  // of its mode, or one whose check() now refuses the op). Compact modes: the quantization at
  // construction runs on PACK_POOL (nullptr: the caller).
  Linear(const LinearWeights& w, const LinearSelection& judged, ThreadPool* pack_pool = nullptr);

  // y[m, out] = x[m, in] . W^T + bias, on POOL. x and y must not overlap. noexcept: every
  // check happened at construction. Allocates nothing.
  void forward(const float* x, std::int64_t m, float* y, ThreadPool& pool) const noexcept;
  // One pool job for several layers that read the same x (an attention's q, k and v): their
  // tasks in one list, so the workers meet once instead of once a layer (once per
  // kMaxTogether layers). ys[i] (one per layer, none overlapping x) gets exactly
  // layers[i]->forward's bits; every layer's in() is x's width.
  static constexpr std::size_t kMaxTogether = 4;
  static void forward_together(std::span<const Linear* const> layers, const float* x,
                               std::int64_t m, std::span<float* const> ys,
                               ThreadPool& pool) noexcept;

  std::int64_t in() const noexcept { return w_.in; }
  std::int64_t out() const noexcept { return w_.out; }
  const LinearWeights& weights() const noexcept { return w_; }
  DenseMode mode() const noexcept { return selection_.op.mode; }
  // The bytes one forward call reads of the weights (for bandwidth reports): the published
  // matrix, or the compact codes and scales.
  std::size_t weight_bytes() const noexcept;
  const char* kernel_name() const noexcept { return kernel_name_; }
  const LinearSelection& selection() const noexcept { return selection_; }

 private:
  std::int64_t rows_per_task(std::int64_t m, int threads) const noexcept;
  // Output rows [first, first + rows) of y for x's m rows: one task of forward's job.
  void run_rows(const float* x, std::int64_t m, float* y, std::int64_t first,
                std::int64_t rows) const noexcept;

  LinearWeights w_;
  LinearSelection selection_;
  const char* kernel_name_ = "portable_fp32";
  LinearF32Fn f32_ = nullptr;
  LinearCompactFn compact_ = nullptr;
  std::vector<float> bias_;         // f32 copy (empty: no bias)
  std::vector<std::uint8_t> packed_;  // compact modes: CompactWeights' groups
};

}  // namespace mxmoe::dense
