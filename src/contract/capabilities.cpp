// check_capabilities: the predicates every backend shares, each failing one reported as
// its own Rejection (never only the first).
#include "contract/capabilities.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "mxmoe/build_info.hpp"
#include "mxmoe/placement.hpp"

namespace mxmoe {
namespace {

template <class T>
bool contains(const std::vector<T>& items, const T& value) {
  return std::find(items.begin(), items.end(), value) != items.end();
}

template <class Enum>
std::string names(const std::vector<Enum>& values) {
  std::string text;
  for (Enum v : values) {
    if (!text.empty()) text += ", ";
    text += to_string(v);
  }
  return text.empty() ? "none" : text;
}

void check_isa(const BackendCapabilities& caps, const Hardware& hw, std::vector<Rejection>& out) {
  for (std::string_view feature : caps.isa) {
    const std::optional<bool> present = isa_feature(hw.isa, feature);
    if (present.value_or(false)) continue;
    const std::string name(feature);
    if (contains(hw.os_denied, name)) {
      out.push_back(
          {ReasonCode::os_denied,
           fmt::format("the CPU has {} but the OS did not grant its register state", name), name,
           "denied by the OS",
           name.rfind("amx", 0) == 0
               ? "use Linux >= 5.16 and allow arch_prctl(ARCH_REQ_XCOMP_PERM) (check "
                 "container seccomp filters)"
               : "use an OS/hypervisor that enables this register state (XCR0)"});
      continue;
    }
    std::string actual =
        fmt::format("not available on {}", hw.model.empty() ? "this CPU" : hw.model);
    std::string remedy = fmt::format("run on a CPU with {}", name);
    if (!hw.isa_cap.empty()) {
      actual += fmt::format(" (ISA capped at '{}')", hw.isa_cap);
      remedy = fmt::format("raise or unset MXMOE_MAX_ISA (now '{}'), or run on a CPU with {}",
                           hw.isa_cap, name);
    }
    if (!present.has_value()) actual = "unknown feature name";
    out.push_back({ReasonCode::unsupported_isa,
                   fmt::format("the backend needs the {} instructions", name), name, actual,
                   remedy});
  }
}

void check_dimension(const char* label, int value, int multiple, std::vector<Rejection>& out) {
  if (value > 0 && (multiple <= 1 || value % multiple == 0)) return;
  out.push_back({ReasonCode::shape_alignment,
                 fmt::format("{} must be a positive multiple of {}", label, multiple),
                 fmt::format("{} multiple of {}", label, multiple),
                 fmt::format("{}={}", label, value), "pad the layer or choose another backend"});
}

}  // namespace

bool activation_scale_is_per_token(ActivationFormat format) noexcept {
  switch (format) {
    case ActivationFormat::f32:    // no scale
    case ActivationFormat::bf16:   // no scale
    case ActivationFormat::int8:   // float32 scale per 32-element block of one token
    case ActivationFormat::mxfp8:  // E8M0 scale per 32-element block of one token
      return true;
  }
  return false;
}

std::vector<Rejection> check_capabilities(const BackendCapabilities& caps, const Deployment& d) {
  std::vector<Rejection> out;
  const LayerSpec& layer = d.layer;
  const Request& req = d.request;
  // judge() always resolves the activation; a direct caller that left it unset gets the
  // default preference (bf16) rather than an exception.
  const ActivationFormat act = req.activation.value_or(kDefaultActivation);

  if (!caps.uncompiled_kernels.empty()) {
    std::string sets;
    for (std::string_view s : caps.uncompiled_kernels)
      sets += (sets.empty() ? "" : ", ") + std::string(s);
    out.push_back({ReasonCode::not_compiled,
                   fmt::format("this build of mxmoe has no {} kernels", sets),
                   fmt::format("a build with the {} kernels", sets),
                   fmt::format("built for {}", build_info::kTargetArch),
                   fmt::format("use an {} build of mxmoe",
                               caps.kernels_arch.empty() ? "other" : caps.kernels_arch)});
  }
  check_isa(caps, d.hardware, out);

  if (!contains(caps.weight_formats, layer.weight_format))
    out.push_back({ReasonCode::weight_format,
                   fmt::format("expert weights in {} are not readable by this backend",
                               to_string(layer.weight_format)),
                   names(caps.weight_formats), std::string(to_string(layer.weight_format)), ""});

  if (!contains(caps.activations, act))
    out.push_back({ReasonCode::activation_format,
                   fmt::format("activation format {} is not implemented", to_string(act)),
                   names(caps.activations), std::string(to_string(act)),
                   caps.activations.empty() ? ""
                                            : fmt::format("activation={} (--activation {})",
                                                          to_string(caps.activations.front()),
                                                          to_string(caps.activations.front()))});

  if (!contains(caps.activation_fns, layer.activation))
    out.push_back(
        {ReasonCode::activation_fn,
         fmt::format("expert activation {} is not implemented", to_string(layer.activation)),
         names(caps.activation_fns), std::string(to_string(layer.activation)), ""});

  if (!contains(caps.routing_methods, layer.routing))
    out.push_back({ReasonCode::routing,
                   fmt::format("routing method {} is not implemented", to_string(layer.routing)),
                   names(caps.routing_methods), std::string(to_string(layer.routing)), ""});

  check_dimension("hidden", layer.hidden, caps.dim_multiple, out);
  check_dimension("intermediate", layer.intermediate, caps.dim_multiple, out);
  if (layer.shared_experts > 0)
    check_dimension("shared_intermediate", layer.shared_intermediate, caps.dim_multiple, out);

  if (req.batch_invariant && !activation_scale_is_per_token(act)) {
    out.push_back({ReasonCode::batch_invariance,
                   fmt::format("activation {} scales by the whole batch, so a token's output "
                               "depends on its neighbours",
                               to_string(act)),
                   "per-token activation scales", std::string(to_string(act)),
                   "batch_invariant=false, or a per-token format (activation=bf16)"});
  } else if (req.batch_invariant && !contains(caps.batch_invariant_activations, act)) {
    std::string remedy = "batch_invariant=false";
    for (ActivationFormat f : caps.batch_invariant_activations)
      if (contains(caps.activations, f)) remedy += fmt::format(", or activation={}", to_string(f));
    out.push_back({ReasonCode::batch_invariance,
                   fmt::format("batch invariance is not proven for activation {}", to_string(act)),
                   "batch-invariant activation: " + names(caps.batch_invariant_activations),
                   std::string(to_string(act)), remedy});
  }

  if (req.ep_size < 1) {
    out.push_back({ReasonCode::expert_parallel, "expert-parallel size must be at least 1",
                   "ep_size >= 1", fmt::format("ep_size={}", req.ep_size), "ep_size=1"});
  } else {
    if (req.ep_rank < 0 || req.ep_rank >= req.ep_size)
      out.push_back({ReasonCode::expert_parallel, "expert-parallel rank out of range",
                     fmt::format("0 <= ep_rank < {}", req.ep_size),
                     fmt::format("ep_rank={}", req.ep_rank), "choose a rank below ep_size"});
    // Any split is fine (uneven ranges, a rank with no experts); only a malformed table is not.
    try {
      (void)placement_of(req, layer.num_experts);
    } catch (const std::invalid_argument& e) {
      out.push_back({ReasonCode::expert_parallel,
                     fmt::format("the expert placement is invalid: {}", e.what()),
                     fmt::format("one rank in [0, {}) for each of the {} experts", req.ep_size,
                                 layer.num_experts),
                     fmt::format("placement of {} entries", req.placement.size()),
                     "fix the placement table, or leave it empty for contiguous ranges"});
    }
  }

  if (caps.needs_cuda && d.hardware.cuda_devices.empty())
    out.push_back({ReasonCode::no_device, "the backend needs a CUDA device", "a CUDA device",
                   "none", "run on a machine with a supported GPU"});
  return out;
}

}  // namespace mxmoe
