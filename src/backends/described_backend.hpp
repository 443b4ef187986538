// Most backends are data: a name, a description, a capability table, the sustained rates of
// the cost model and a kernel factory. DescribedBackend turns that data into a Backend, so
// a backend's folder holds its description and its kernels, not another copy of the class.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "backends/kernel.hpp"
#include "backends/kernel_isa.hpp"
#include "contract/backend.hpp"
#include "contract/capabilities.hpp"
#include "contract/cost.hpp"

namespace mxmoe {

struct BackendDescription {
  std::string_view name;
  std::string_view description;
  std::string_view numerics_class;             // required: Backend::numerics_class()
  std::string_view peak_class;                 // required: Backend::peak_class()
  std::vector<std::string_view> former_names;  // Backend::former_names(): names it had before
  // The kernel folders its code calls (kernel_isa.inc). Their features become
  // capabilities.isa; a set this build left out makes check() say not_compiled.
  std::vector<KernelIsa> kernels;
  BackendCapabilities capabilities;  // isa is derived from `kernels`: leave it empty
  Throughput throughput;  // sustained per-thread rates (docs/perf/ says where they come from)
  // Optional: a second compute rate used when every touched expert receives at least
  // min_tokens_per_expert tokens (e.g. matrix units that need full tiles).
  Throughput many_tokens_throughput{};
  double min_tokens_per_expert = 0;
  // The reference the others are checked against (Backend::is_reference): chosen only when
  // forced or allowed.
  bool is_reference = false;
  // Packs the weights; only called when check() passed.
  std::unique_ptr<ExpertKernel> (*create)(const Deployment&, const LayerWeights&) = nullptr;
};

class DescribedBackend final : public Backend {
 public:
  explicit DescribedBackend(BackendDescription d) : d_(std::move(d)) {
    if (d_.numerics_class.empty())  // a registry test builds every backend: caught there
      throw std::logic_error(std::string(d_.name) + ": the description names no numerics class");
    if (d_.peak_class.empty())  // the registry test checks that `mxmoe limits` measures it
      throw std::logic_error(std::string(d_.name) + ": the description names no peak class");
    for (KernelIsa set : d_.kernels) {
      for (std::string_view f : kernel_isa_features(set))
        if (std::find(d_.capabilities.isa.begin(), d_.capabilities.isa.end(), f) ==
            d_.capabilities.isa.end())
          d_.capabilities.isa.push_back(f);
      if (!kernel_isa_compiled(set)) d_.capabilities.uncompiled_kernels.push_back(to_string(set));
      d_.capabilities.kernels_arch = kernel_isa_arch(set);
    }
  }
  std::string_view name() const noexcept override { return d_.name; }
  std::span<const std::string_view> former_names() const noexcept override {
    return d_.former_names;
  }
  std::string_view description() const noexcept override { return d_.description; }
  bool is_reference() const noexcept override { return d_.is_reference; }
  std::string_view numerics_class() const noexcept override { return d_.numerics_class; }
  std::string_view peak_class() const noexcept override { return d_.peak_class; }
  std::vector<Rejection> check(const Deployment& d) const override {
    return check_capabilities(d_.capabilities, d);
  }
  double estimate_us(const Deployment& d) const override {
    const double tokens_per_expert = static_cast<double>(d.request.tokens_hint) * d.layer.top_k /
                                     static_cast<double>(d.layer.num_experts);
    const bool many = d_.min_tokens_per_expert > 0 && tokens_per_expert >= d_.min_tokens_per_expert;
    return roofline_estimate_us(d, many ? d_.many_tokens_throughput : d_.throughput);
  }
  std::unique_ptr<ExpertKernel> create(const Deployment& d,
                                       const LayerWeights& weights) const override {
    if (d_.create == nullptr)  // check() said not_compiled; create() is never reached then
      throw std::logic_error(std::string(d_.name) + ": not compiled into this build");
    return d_.create(d, weights);
  }
  const BackendCapabilities& capabilities() const noexcept { return d_.capabilities; }

 private:
  BackendDescription d_;
};

// The class whose MXFP4 experts round their GEMM inputs beyond the Request's format: the bf16
// values carried as int16 with a power-of-two scale per 32-block (avx2_int16, neon_int16).
inline constexpr std::string_view kInt16Block32 = "int16_block32";
// True for such a backend: `mxmoe verify` and the conformance tests evaluate the float64
// reference with that rounding for it (round_activations_int16_blocks).
inline bool rounds_to_int16_blocks(const Backend& b) noexcept {
  return b.numerics_class() == kInt16Block32;
}

}  // namespace mxmoe
