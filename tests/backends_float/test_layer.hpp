// Test fixtures for the float/bf16 SIMD backends: a random MXFP4 layer with controllable
// scale codes, random routing grouped by expert, and a runner for any ExpertKernel.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backends/kernel.hpp"
#include "mxmoe/deployment.hpp"
#include "mxmoe/oracle.hpp"
#include "mxmoe/weights.hpp"

namespace mxmoe::test {

struct ScaleRange {
  std::uint8_t lo = 120, hi = 126;  // E8M0 codes drawn uniformly in [lo, hi]
};

// Owns random MXFP4 weights (every E2M1 code) and biases for a LayerSpec.
class RandomLayer {
 public:
  RandomLayer(const LayerSpec& spec, std::uint64_t seed, ScaleRange w1_scales = {},
              ScaleRange w2_scales = {});
  const LayerWeights& weights() const noexcept { return views_; }
  std::size_t mxfp4_bytes() const noexcept { return views_.w1.bytes() + views_.w2.bytes(); }

 private:
  std::vector<std::uint8_t> w1_blocks_, w1_scales_, w2_blocks_, w2_scales_;
  std::vector<float> b1_, b2_;
  LayerWeights views_;
};

// The routing of a call: ids [tokens * top_k], the expert of each slot; run_kernel groups
// the slots by expert the way the runtime does (group_slots).
struct Routing {
  std::vector<std::int32_t> ids;
  int experts = 0;
};
// ids [tokens * top_k]: expert of each slot (distinct per token), from `allowed` (all when
// empty).
std::vector<std::int32_t> random_ids(std::int64_t tokens, int top_k, int experts,
                                     std::mt19937_64& rng, const std::vector<int>& allowed = {});
Routing group_by_expert(const std::vector<std::int32_t>& ids, int experts);

std::vector<float> random_tokens(std::int64_t tokens, int hidden, std::mt19937_64& rng);

// Runs kernel on x with the given routing and thread count; returns slot_out [M*k, H]
// (slots of no local expert stay NaN).
std::vector<float> run_kernel(const ExpertKernel& kernel, const LayerSpec& spec,
                              const std::vector<float>& x, const Routing& routing, int threads);

Deployment deployment(const LayerSpec& spec, ActivationFormat format, const Hardware& hw);
Hardware sapphire_rapids();  // every ISA feature of this CI machine, as data

LayerSpec small_spec(int hidden, int inter, int experts, int top_k, ActivationFn fn,
                     GateUpLayout layout, bool bias);

// ||a - b|| / ||b|| over the elements b marks as written (not NaN).
double relative_l2(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace mxmoe::test
