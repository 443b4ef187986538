// The expert nonlinearities on (gate, up), as scalar functions: the ONE definition of each
// activation's math that the reference backend, the float64 evaluation and every fast
// backend's reference semantics follow (docs/MODELS.md). Templates so the float64
// evaluation runs the same formula in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "mxmoe/layer_spec.hpp"

namespace mxmoe {

template <class T>
T sigmoid(T x) noexcept {
  return T(1) / (T(1) + std::exp(-x));
}

// x * sigmoid(x); exp(-x) overflows to inf for very negative x and the result is -0.
template <class T>
T silu(T x) noexcept {
  return x / (T(1) + std::exp(-x));
}

// gpt-oss: gate clamped from above only, up clamped both ways, "+1" on up.
// std::min/std::clamp keep a NaN input NaN (the comparison is false), never hide it.
template <class T>
T swiglu_oai(T gate, T up, T alpha, T limit) noexcept {
  gate = std::min(gate, limit);
  up = std::clamp(up, -limit, limit);
  return gate * sigmoid(alpha * gate) * (up + T(1));
}

template <class T>
T silu_glu(T gate, T up) noexcept {
  return silu(gate) * up;
}

// DeepSeek-V4: the SiLU-GLU with gpt-oss-style clamps and no "+1".
template <class T>
T silu_glu_clamp(T gate, T up, T limit) noexcept {
  gate = std::min(gate, limit);
  up = std::clamp(up, -limit, limit);
  return silu(gate) * up;
}

template <class T>
T activate(ActivationFn fn, const ActivationParams& p, T gate, T up) noexcept {
  switch (fn) {
    case ActivationFn::swiglu_oai:
      return swiglu_oai(gate, up, static_cast<T>(p.alpha), static_cast<T>(p.limit));
    case ActivationFn::silu_glu:
      return silu_glu(gate, up);
    case ActivationFn::silu_glu_clamp:
      return silu_glu_clamp(gate, up, static_cast<T>(p.limit));
  }
  return gate;  // unreachable for a valid enum
}

// h [2I] = the first projection's output in spec.gate_up_layout; a [I] = act(gate, up).
template <class T>
void activate_row(const LayerSpec& spec, const T* h, T* a) noexcept {
  const std::int64_t inter = spec.intermediate;
  const bool interleaved = spec.gate_up_layout == GateUpLayout::interleaved;
  for (std::int64_t i = 0; i < inter; ++i) {
    const T gate = interleaved ? h[2 * i] : h[i];
    const T up = interleaved ? h[2 * i + 1] : h[inter + i];
    a[i] = activate(spec.activation, spec.activation_params, gate, up);
  }
}

}  // namespace mxmoe
