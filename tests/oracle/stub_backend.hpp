// Test backends: a capability table judged by the shared check_capabilities(), plus
// optional fixed rejections (e.g. not_compiled), and a fixed cost. They are passed to
// judge()/select() explicitly, so these tests do not depend on which backends are built.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/kernel.hpp"
#include "contract/capabilities.hpp"
#include "mxmoe/oracle.hpp"
#include "oracle/candidates.hpp"

namespace mxmoe::testing {

class StubBackend final : public Backend {
 public:
  // Costs cost_us + us_per_token * tokens_hint.
  StubBackend(std::string name, BackendCapabilities caps, double cost_us,
              std::vector<Rejection> fixed = {}, double us_per_token = 0)
      : name_(std::move(name)),
        caps_(std::move(caps)),
        cost_us_(cost_us),
        us_per_token_(us_per_token),
        fixed_(std::move(fixed)) {}
  std::string_view name() const noexcept override { return name_; }
  std::string_view description() const noexcept override { return "test stub"; }
  std::string_view numerics_class() const noexcept override { return "stub"; }
  std::string_view peak_class() const noexcept override { return "stub"; }
  std::vector<Rejection> check(const Deployment& d) const override {
    std::vector<Rejection> r = check_capabilities(caps_, d);
    r.insert(r.end(), fixed_.begin(), fixed_.end());
    return r;
  }
  double estimate_us(const Deployment& d) const override {
    return cost_us_ + us_per_token_ * d.request.tokens_hint;
  }
  std::unique_ptr<ExpertKernel> create(const Deployment&, const LayerWeights&) const override {
    return nullptr;  // never executed: these tests only judge
  }
  bool is_reference() const noexcept override { return reference_; }
  StubBackend& as_reference() {
    reference_ = true;
    return *this;
  }

 private:
  bool reference_ = false;
  std::string name_;
  BackendCapabilities caps_;
  double cost_us_, us_per_token_;
  std::vector<Rejection> fixed_;
};

// Everything a portable backend implements.
inline BackendCapabilities portable_caps() {
  BackendCapabilities c;
  c.activations = all_activation_formats();
  c.batch_invariant_activations = all_activation_formats();
  c.activation_fns = {ActivationFn::swiglu_oai, ActivationFn::silu_glu,
                      ActivationFn::silu_glu_clamp};
  c.routing_methods = {RoutingMethod::topk_softmax, RoutingMethod::softmax_topk,
                       RoutingMethod::sigmoid_group_topk, RoutingMethod::sqrtsoftplus_topk};
  return c;
}

inline BackendCapabilities with_isa(BackendCapabilities c, std::vector<std::string_view> isa) {
  c.isa = std::move(isa);
  return c;
}

// A gpt-oss-20b-shaped layer (E=32, top_k=4, H=I=2880) on a full-featured x86 machine.
inline Deployment sample_deployment() {
  Deployment d;
  d.layer.name = "test-layer";
  d.layer.family = Family::gpt_oss;
  d.layer.num_experts = 32;
  d.layer.top_k = 4;
  d.layer.hidden = 2880;
  d.layer.intermediate = 2880;
  d.hardware.vendor = "GenuineIntel";
  d.hardware.model = "Test CPU";
  d.hardware.logical_cpus = 8;
  for (std::string_view n : isa_feature_names(d.hardware.arch))
    set_isa_feature(d.hardware.isa, n, true);
  d.request.activation = ActivationFormat::bf16;
  return d;
}

template <class... B>
std::vector<const Backend*> candidates(const B&... b) {
  return {static_cast<const Backend*>(&b)...};
}

}  // namespace mxmoe::testing
