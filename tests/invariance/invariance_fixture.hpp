// Shared pieces of the batch-invariance suite: the claims the suite covers, the test layer,
// and a layer bound to one named backend.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/registry.hpp"
#include "layer/layer_fixture.hpp"
#include "mxmoe/layer.hpp"

namespace invariance_test {

// (backend, activation format) pairs the conformance suite runs. A backend that adds a format
// to batch_invariant_activations must be added here too, or ClaimsAreCovered fails: no
// backend can claim invariance without being tested.
struct Claim {
  std::string_view backend;
  mxmoe::ActivationFormat format;
};
inline const std::vector<Claim>& covered_claims() {
  using mxmoe::ActivationFormat;
  static const std::vector<Claim> claims{
      {"amx_int8", ActivationFormat::int8},    {"amx_bf16", ActivationFormat::bf16},
      {"amx_bf16", ActivationFormat::mxfp8},   {"avx512_vnni_int8", ActivationFormat::int8},
      {"avx512_bf16", ActivationFormat::bf16}, {"avx512_bf16", ActivationFormat::mxfp8},
      {"avx2_int8", ActivationFormat::int8},   {"avx_vnni_int8", ActivationFormat::int8},
      {"avx2_int16", ActivationFormat::bf16},  {"neon_dotprod_int8", ActivationFormat::int8},
      {"neon_int16", ActivationFormat::bf16},  {"neon_i8mm_int8", ActivationFormat::int8},
      {"sve_int8", ActivationFormat::int8},    {"neon_fp32", ActivationFormat::f32},
      {"neon_fp32", ActivationFormat::bf16},   {"avx2_fp32", ActivationFormat::f32},
      {"avx2_fp32", ActivationFormat::bf16},   {"reference", ActivationFormat::f32},
      {"reference", ActivationFormat::bf16},   {"reference", ActivationFormat::int8},
      {"reference", ActivationFormat::mxfp8},
  };
  return claims;
}

inline std::string claim_name(std::string_view backend, mxmoe::ActivationFormat format) {
  return std::string(backend) + "_" + std::string(mxmoe::to_string(format));
}

// gpt-oss math (interleaved gate/up, swiglu_oai, biases, top-k softmax) at a small shape;
// H=96 and I=160 are multiples of 32 but not of 64 or 128, so kernels run their tails.
inline mxmoe::LayerSpec small_spec(int experts = 8, int hidden = 96, int intermediate = 160) {
  mxmoe::LayerSpec s = mxmoe::preset("gpt-oss-20b");
  s.name = "gpt-oss (invariance test shape)";
  s.num_experts = experts;
  s.top_k = 2;
  s.hidden = hidden;
  s.intermediate = intermediate;
  return s;
}

// DeepSeek-V4 at a small shape: sqrt-softplus routing with a selection bias or, with hash,
// the first layers' token-id routing; clamped SiLU-GLU, gate/up halves (W1 in two segments
// per expert) and the FP8 shared expert (the dense path every backend shares).
inline mxmoe::LayerSpec small_v4_spec(bool hash) {
  mxmoe::LayerSpec s =
      layer_test::shrink(hash ? "deepseek-v4-flash-hash" : "deepseek-v4-flash", 8, 2, 96, 160);
  if (hash) s.vocab = 1000;
  return s;
}

inline mxmoe::Deployment deployment(const mxmoe::LayerSpec& spec, mxmoe::ActivationFormat format,
                                    bool batch_invariant, int tokens_hint = 1) {
  mxmoe::Deployment d;
  d.layer = spec;
  d.hardware = mxmoe::probe_hardware();
  d.request.activation = format;
  d.request.batch_invariant = batch_invariant;
  d.request.threads = 2;
  d.request.tokens_hint = tokens_hint;
  return d;
}

// A selection bound to `backend` (as the oracle would produce when it chose it).
inline mxmoe::Selection forced_selection(const mxmoe::LayerSpec& spec, std::string_view backend,
                                         mxmoe::ActivationFormat format) {
  mxmoe::Selection s;
  s.deployment = deployment(spec, format, /*batch_invariant=*/true);
  s.chosen = std::string(backend);
  s.why = "invariance test";
  return s;
}

// True when the backend accepts the batch-invariant deployment on this machine.
inline bool runnable_here(const mxmoe::LayerSpec& spec, std::string_view backend,
                          mxmoe::ActivationFormat format) {
  const mxmoe::Backend* b = mxmoe::find_backend(backend);
  return b != nullptr && b->check(deployment(spec, format, true)).empty();
}

}  // namespace invariance_test
