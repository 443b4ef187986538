// Dense linear layers (dense_linear.hpp): the weights' checks, the kernel choice and the
// split of the output rows over the pool.
#include "backends/dense/dense_linear.hpp"

#include <algorithm>
#include <stdexcept>

#include "base/thread_pool.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe::dense {

namespace {

// Output rows per task: a task reads 16 rows' weights once for every token of the call.
constexpr std::int64_t kRowsPerTask = 16;
// The largest dimension accepted: far above any model (vocab 1M, hidden 64k).
constexpr std::int64_t kMaxDim = std::int64_t{1} << 24;

float bias_at(const LinearWeights& w, std::int64_t o) noexcept {
  if (w.bias == nullptr) return 0.0f;
  if (w.bias_element == ElementType::bf16)
    return bf16_to_f32(static_cast<const std::uint16_t*>(w.bias)[o]);
  return static_cast<const float*>(w.bias)[o];
}

}  // namespace

Linear::Linear(const LinearWeights& w, const Hardware& hardware) : w_(w), dot_(&dense_dot_portable) {
  const std::string what = "dense weight '" + w.name + "'";
  if (w.element != ElementType::f32 && w.element != ElementType::bf16)
    throw std::invalid_argument(what + ": element type " + std::string(to_string(w.element)) +
                                " is not f32 or bf16");
  if (w.bias != nullptr && w.bias_element != ElementType::f32 && w.bias_element != ElementType::bf16)
    throw std::invalid_argument(what + ": bias element type " +
                                std::string(to_string(w.bias_element)) + " is not f32 or bf16");
  if (w.data == nullptr) throw std::invalid_argument(what + ": no data");
  if (w.out < 1 || w.out > kMaxDim || w.in < 1 || w.in > kMaxDim)
    throw std::invalid_argument(what + ": shape [" + std::to_string(w.out) + ", " +
                                std::to_string(w.in) + "] out of range");
  if (w.in % kLanes != 0)
    throw std::invalid_argument(what + ": input size " + std::to_string(w.in) +
                                " is not a multiple of " + std::to_string(kLanes));
#if MXMOE_X86_KERNELS
  if (isa_feature(hardware.isa, "avx2").value_or(false) &&
      isa_feature(hardware.isa, "fma").value_or(false)) {
    dot_ = &dense_dot_avx2;
    kernel_name_ = "avx2_fp32";
  }
#else
  (void)hardware;
#endif
}

std::size_t Linear::weight_bytes() const noexcept {
  return static_cast<std::size_t>(w_.out * w_.in) * (w_.element == ElementType::bf16 ? 2 : 4);
}

void Linear::forward(const float* x, std::int64_t m, float* y, ThreadPool& pool) const noexcept {
  if (m <= 0) return;
  const std::int64_t tasks = (w_.out + kRowsPerTask - 1) / kRowsPerTask;
  const std::size_t element_bytes = w_.element == ElementType::bf16 ? 2 : 4;
  pool.parallel_for(tasks, [&](std::int64_t task, int) {
    const std::int64_t r0 = task * kRowsPerTask, r1 = std::min(r0 + kRowsPerTask, w_.out);
    for (std::int64_t t0 = 0; t0 < m; t0 += kMaxTokens) {
      const int count = static_cast<int>(std::min<std::int64_t>(kMaxTokens, m - t0));
      const float* rows_x[kMaxTokens];
      for (int j = 0; j < count; ++j) rows_x[j] = x + (t0 + j) * w_.in;
      for (std::int64_t r = r0; r < r1; r += kMaxRows) {
        const int rows = static_cast<int>(std::min<std::int64_t>(kMaxRows, r1 - r));
        const DenseRows rw{static_cast<const char*>(w_.data) +
                               static_cast<std::size_t>(r * w_.in) * element_bytes,
                           w_.element == ElementType::bf16, w_.in, w_.in};
        float o[kMaxRows * kMaxTokens];
        dot_(rw, rows, rows_x, count, o);
        for (int n = 0; n < rows; ++n)
          for (int j = 0; j < count; ++j)
            y[(t0 + j) * w_.out + r + n] = o[n * count + j] + bias_at(w_, r + n);
      }
    }
  });
}

}  // namespace mxmoe::dense
