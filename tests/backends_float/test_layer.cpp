#include "backends_float/test_layer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backends/expert_batch.hpp"
#include "base/thread_pool.hpp"

namespace mxmoe::test {
namespace {

void fill_mxfp4(std::vector<std::uint8_t>& blocks, std::vector<std::uint8_t>& scales,
                std::int64_t experts, std::int64_t rows, std::int64_t cols, ScaleRange range,
                std::mt19937_64& rng) {
  blocks.resize(static_cast<std::size_t>(experts * rows * cols / 2));
  scales.resize(static_cast<std::size_t>(experts * rows * cols / 32));
  std::uniform_int_distribution<int> byte(0, 255), code(range.lo, range.hi);
  for (auto& b : blocks) b = static_cast<std::uint8_t>(byte(rng));
  for (auto& s : scales) s = static_cast<std::uint8_t>(code(rng));
}

}  // namespace

RandomLayer::RandomLayer(const LayerSpec& spec, std::uint64_t seed, ScaleRange w1_scales,
                         ScaleRange w2_scales) {
  std::mt19937_64 rng(seed);
  const std::int64_t e = spec.num_experts, h = spec.hidden, i = spec.intermediate;
  fill_mxfp4(w1_blocks_, w1_scales_, e, 2 * i, h, w1_scales, rng);
  fill_mxfp4(w2_blocks_, w2_scales_, e, h, i, w2_scales, rng);
  views_.w1 = Mxfp4View::contiguous(w1_blocks_.data(), w1_scales_.data(), e, 2 * i, h);
  views_.w2 = Mxfp4View::contiguous(w2_blocks_.data(), w2_scales_.data(), e, h, i);
  if (spec.expert_bias) {
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    b1_.resize(static_cast<std::size_t>(e * 2 * i));
    b2_.resize(static_cast<std::size_t>(e * h));
    for (auto& v : b1_) v = u(rng);
    for (auto& v : b2_) v = u(rng);
    views_.b1 = DenseView{ElementType::f32, b1_.data(), e, 2 * i};
    views_.b2 = DenseView{ElementType::f32, b2_.data(), e, h};
  }
}

Routing group_by_expert(const std::vector<std::int32_t>& ids, int experts) {
  return Routing{ids, experts};
}

std::vector<std::int32_t> random_ids(std::int64_t tokens, int top_k, int experts,
                                     std::mt19937_64& rng, const std::vector<int>& allowed) {
  std::vector<int> pool = allowed;
  if (pool.empty()) {
    pool.resize(static_cast<std::size_t>(experts));
    std::iota(pool.begin(), pool.end(), 0);
  }
  std::vector<std::int32_t> ids;
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int k = 0; k < top_k; ++k) ids.push_back(pool[static_cast<std::size_t>(k)]);
  }
  return ids;
}

std::vector<float> random_tokens(std::int64_t tokens, int hidden, std::mt19937_64& rng) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens * hidden));
  for (auto& v : x) v = n(rng);
  return x;
}

std::vector<float> run_kernel(const ExpertKernel& kernel, const LayerSpec& spec,
                              const std::vector<float>& x, const Routing& routing, int threads) {
  const auto tokens = static_cast<std::int64_t>(x.size()) / spec.hidden;
  ThreadPool pool(threads);
  const std::size_t ws_bytes = kernel.workspace_bytes(tokens, tokens * spec.top_k, threads);
  std::vector<std::byte> storage(ws_bytes + 64);
  auto* ws = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(storage.data()) + 63) /
                                          64 * 64);
  std::vector<float> out(static_cast<std::size_t>(tokens * spec.top_k * spec.hidden),
                         std::numeric_limits<float>::quiet_NaN());
  ExpertForward f;
  f.x = x.data();
  f.rows = tokens;
  GroupedSlots grouped;
  group_slots(routing.ids, spec.top_k, routing.experts, grouped);
  f.batch = grouped.batch;
  f.slot_out = out.data();
  f.pool = &pool;
  f.workspace = ws;
  f.workspace_size = ws_bytes;
  kernel.run(f);
  return out;
}

Hardware sapphire_rapids() {
  Hardware hw;
  hw.vendor = "GenuineIntel";
  hw.model = "test Sapphire Rapids";
  hw.logical_cpus = 2;
  for (std::string_view name : isa_feature_names()) set_isa_feature(hw.isa, name, true);
  hw.source = "test";
  return hw;
}

Deployment deployment(const LayerSpec& spec, ActivationFormat format, const Hardware& hw) {
  Deployment d;
  d.layer = spec;
  d.hardware = hw;
  d.request.activation = format;
  return d;
}

LayerSpec small_spec(int hidden, int inter, int experts, int top_k, ActivationFn fn,
                     GateUpLayout layout, bool bias) {
  LayerSpec s;
  s.name = "test";
  s.family = Family::gpt_oss;
  s.num_experts = experts;
  s.top_k = top_k;
  s.hidden = hidden;
  s.intermediate = inter;
  s.activation = fn;
  s.gate_up_layout = layout;
  s.expert_bias = bias;
  return s;
}

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (std::isnan(b[i])) continue;
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace mxmoe::test
