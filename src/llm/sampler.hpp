// Choosing the next token from a row of logits: greedy, or sampling with temperature,
// top-k, top-p and min-p from a seeded generator of mxmoe's own (xoshiro256**, seeded by
// splitmix64), so the same seed gives the same tokens on every machine and library version.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mxmoe::llm {

struct SamplerSettings {
  float temperature = 0.0f;  // 0: greedy (the first of the largest logits)
  int top_k = 0;             // 0: all
  float top_p = 1.0f;        // (0, 1]
  float min_p = 0.0f;        // [0, 1]: drop tokens below min_p * the best's probability
  std::uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerSettings& settings);
  // The chosen token id. SCRATCH is reused between calls (allocates on the first only).
  std::int32_t next(std::span<const float> logits);
  // The generator's next uniform double in [0, 1) (exposed for tests).
  double uniform() noexcept;

 private:
  SamplerSettings s_;
  std::uint64_t state_[4];
  std::vector<std::int32_t> order_;
  std::vector<double> probs_;
};

// The index of the largest value, the lowest index among equals (NaN never wins).
std::int32_t argmax(std::span<const float> logits) noexcept;

}  // namespace mxmoe::llm
