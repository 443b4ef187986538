// Shared helpers of the int8 backend tests: a small random layer with tails, random routing
// grouped by expert (the runtime's counting sort), a runner for any ExpertKernel, and a float64
// evaluation of the int8 semantics written here, independent of every backend.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backends/expert_batch.hpp"
#include "backends/kernel.hpp"
#include "base/thread_pool.hpp"
#include "model/activation.hpp"
#include "mxmoe/deployment.hpp"
#include "mxmoe/format.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/oracle.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::int8_test {

// H = 96 and I = 160: multiples of 32 but not of 64 (the 2880 = 90 x 32 case in small).
inline LayerSpec small_spec(ActivationFn fn = ActivationFn::swiglu_oai,
                            GateUpLayout layout = GateUpLayout::interleaved, bool bias = true) {
  LayerSpec s;
  s.name = "int8-test";
  s.family = Family::gpt_oss;
  s.num_experts = 6;
  s.top_k = 3;
  s.hidden = 96;
  s.intermediate = 160;
  s.activation = fn;
  s.gate_up_layout = layout;
  s.expert_bias = bias;
  return s;
}

inline Deployment int8_deployment(const LayerSpec& spec) {
  Deployment d;
  static const Hardware here = probe_hardware();
  d.layer = spec;
  d.hardware = here;
  d.request.activation = ActivationFormat::int8;
  return d;
}

// Token t's expert choices: `experts[t*k + j]`, distinct per token.
struct Routing {
  std::int64_t tokens = 0;
  int top_k = 0;
  std::vector<int> experts;
};

// Random distinct choices among the first `usable` experts (the others receive no token).
inline Routing random_routing(std::int64_t tokens, int top_k, int usable, std::mt19937& rng) {
  Routing r{tokens, top_k, {}};
  std::vector<int> ids(static_cast<std::size_t>(usable));
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (int e = 0; e < usable; ++e) ids[static_cast<std::size_t>(e)] = e;
    std::shuffle(ids.begin(), ids.end(), rng);
    r.experts.insert(r.experts.end(), ids.begin(), ids.begin() + top_k);
  }
  return r;
}

inline std::vector<float> random_input(std::int64_t tokens, int hidden, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens * hidden));
  for (float& v : x) v = dist(rng);
  return x;
}

// Runs kernel on (x, routing) and returns slot_out [tokens*k, H]; unwritten slots stay NaN.
inline std::vector<float> run_kernel(const ExpertKernel& kernel, const LayerSpec& spec,
                                     const std::vector<float>& x, const Routing& r,
                                     ThreadPool& pool) {
  GroupedSlots g;
  group_slots(std::vector<std::int32_t>(r.experts.begin(), r.experts.end()), r.top_k,
              spec.num_experts, g);
  const std::size_t ws_bytes = kernel.workspace_bytes(r.tokens, r.tokens * r.top_k, pool.size());
  auto deleter = [](std::byte* p) { ::operator delete[](p, std::align_val_t{64}); };
  std::unique_ptr<std::byte[], decltype(deleter)> ws(
      static_cast<std::byte*>(
          ::operator new[](std::max<std::size_t>(ws_bytes, 64), std::align_val_t{64})),
      deleter);
  std::vector<float> out(static_cast<std::size_t>(r.tokens * r.top_k * spec.hidden), NAN);
  ExpertForward f;
  f.x = x.data();
  f.rows = r.tokens;
  f.batch = g.batch;
  f.slot_out = out.data();
  f.pool = &pool;
  f.workspace = ws.get();
  f.workspace_size = ws_bytes;
  kernel.run(f);
  return out;
}

inline double relative_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    norm += want[i] * want[i];
  }
  return std::sqrt(err / norm);
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

inline std::vector<float> dequantized_row(const Mxfp4View& w, std::int64_t e, std::int64_t r) {
  std::vector<float> row(static_cast<std::size_t>(w.cols));
  dequantize_mxfp4({w.row_blocks(e, r), static_cast<std::size_t>(w.row_bytes())},
                   {w.row_scale(e, r), static_cast<std::size_t>(w.row_scales())}, row);
  return row;
}

inline std::vector<float> int8_rounded(const float* v, std::size_t n) {
  std::vector<std::int8_t> q(n);
  std::vector<float> d(n / 32), out(n);
  quantize_int8_block32({v, n}, q, d);
  dequantize_int8_block32(q, d, out);
  return out;
}

// The int8 semantics in float64: x and a rounded per token with quantize_int8_block32, the
// GEMMs and the activation in double. a is rounded from float(a) as a backend would.
inline std::vector<double> evaluate_f64(const LayerSpec& spec, const LayerWeights& w,
                                        const std::vector<float>& x, const Routing& r) {
  const std::int64_t h = spec.hidden, inter = spec.intermediate;
  std::vector<double> out(static_cast<std::size_t>(r.tokens * r.top_k * h));
  for (std::int64_t s = 0; s < r.tokens * r.top_k; ++s) {
    const std::int64_t t = s / r.top_k, e = r.experts[static_cast<std::size_t>(s)];
    const std::vector<float> xq = int8_rounded(x.data() + t * h, static_cast<std::size_t>(h));
    std::vector<double> hv(static_cast<std::size_t>(2 * inter));
    for (std::int64_t row = 0; row < 2 * inter; ++row) {
      const std::vector<float> wr = dequantized_row(w.w1, e, row);
      double acc = spec.expert_bias ? static_cast<double>(w.b1.at(e * 2 * inter + row)) : 0.0;
      for (std::int64_t c = 0; c < h; ++c)
        acc += static_cast<double>(wr[static_cast<std::size_t>(c)]) *
               static_cast<double>(xq[static_cast<std::size_t>(c)]);
      hv[static_cast<std::size_t>(row)] = acc;
    }
    std::vector<double> a(static_cast<std::size_t>(inter));
    activate_row(spec, hv.data(), a.data());
    std::vector<float> af(a.begin(), a.end());
    const std::vector<float> aq = int8_rounded(af.data(), af.size());
    for (std::int64_t o = 0; o < h; ++o) {
      const std::vector<float> wr = dequantized_row(w.w2, e, o);
      double acc = spec.expert_bias ? static_cast<double>(w.b2.at(e * h + o)) : 0.0;
      for (std::int64_t c = 0; c < inter; ++c)
        acc += static_cast<double>(wr[static_cast<std::size_t>(c)]) *
               static_cast<double>(aq[static_cast<std::size_t>(c)]);
      out[static_cast<std::size_t>(s * h + o)] = acc;
    }
  }
  return out;
}

}  // namespace mxmoe::int8_test
