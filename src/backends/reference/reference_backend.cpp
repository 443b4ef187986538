// The reference backend: what every other backend is checked against (see reference_kernel.hpp).
// Supports every activation format, function and routing method; batch invariant for all
// formats by construction (per-token rounding, fixed reduction order, unsplit reductions).
#include <memory>

#include "backends/described_backend.hpp"
#include "backends/reference/reference_kernel.hpp"

namespace mxmoe {
namespace {

std::unique_ptr<ExpertKernel> create_reference(const Deployment& d, const LayerWeights& weights) {
  return std::make_unique<reference::ReferenceKernel>(d, weights);
}

}  // namespace

namespace backends {

BackendDescription reference() {
  BackendDescription b;
  b.name = "reference";
  b.numerics_class = "float64_reference";
#if defined(__aarch64__)
  b.peak_class = "fp32_fma_neon";  // plain C++: the build architecture's float FMA
#else
  b.peak_class = "fp32_fma_avx2";
#endif
  b.description =
      "plain C++ (no SIMD), double accumulation; every format; the reference the others are "
      "checked against";
  b.create = &create_reference;
  b.is_reference = true;  // ~1.6 s per gpt-oss-20b call: never chosen unless asked for
  b.capabilities.activations = all_activation_formats();
  b.capabilities.batch_invariant_activations = all_activation_formats();
  // Deliberately slow constants (~1 GFLOP/s per thread, weights read at ~2 GB/s) so any
  // fast backend that supports the deployment ranks ahead of the reference.
  b.throughput = {.weight_gb_per_s_per_thread = 2.0, .gflop_per_s_per_thread = 1.0};
  return b;
}

}  // namespace backends

}  // namespace mxmoe
