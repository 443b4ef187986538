// The sampler (sampler.hpp).
#include "llm/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace mxmoe::llm {

namespace {

std::uint64_t splitmix64(std::uint64_t& x) noexcept {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) noexcept {
  return (x << k) | (x >> (64 - k));
}

}  // namespace

std::int32_t argmax(std::span<const float> logits) noexcept {
  std::int32_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  bool found = false;
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (!found ? !std::isnan(logits[i]) : logits[i] > best_value) {
      best = static_cast<std::int32_t>(i);
      best_value = logits[i];
      found = true;
    }
  return best;
}

Sampler::Sampler(const SamplerSettings& settings) : s_(settings) {
  std::uint64_t x = settings.seed;
  for (auto& word : state_) word = splitmix64(x);
}

double Sampler::uniform() noexcept {
  const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const std::uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return static_cast<double>(result >> 11) * 0x1.0p-53;
}

std::int32_t Sampler::next(std::span<const float> logits) {
  if (s_.temperature <= 0.0f) return argmax(logits);
  const auto n = static_cast<std::int32_t>(logits.size());
  order_.resize(static_cast<std::size_t>(n));
  std::iota(order_.begin(), order_.end(), 0);
  // Best first; equal logits by lower id, so the order is one total order.
  auto better = [&](std::int32_t a, std::int32_t b) {
    const float la = logits[static_cast<std::size_t>(a)], lb = logits[static_cast<std::size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  std::int32_t keep = n;
  if (s_.top_k > 0 && s_.top_k < n) {
    keep = s_.top_k;
    std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), better);
  } else {
    std::sort(order_.begin(), order_.end(), better);
  }
  // Probabilities of the kept tokens at the temperature, in double.
  probs_.resize(static_cast<std::size_t>(keep));
  const double top = logits[static_cast<std::size_t>(order_[0])];
  double total = 0;
  for (std::int32_t i = 0; i < keep; ++i) {
    const double l = logits[static_cast<std::size_t>(order_[static_cast<std::size_t>(i)])];
    const double p = std::isnan(l) ? 0.0 : std::exp((l - top) / static_cast<double>(s_.temperature));
    probs_[static_cast<std::size_t>(i)] = p;
    total += p;
  }
  // min-p: relative to the best token (probability 1 before normalising).
  if (s_.min_p > 0.0f)
    while (keep > 1 && probs_[static_cast<std::size_t>(keep - 1)] < static_cast<double>(s_.min_p)) {
      total -= probs_[static_cast<std::size_t>(keep - 1)];
      --keep;
    }
  // top-p: the smallest prefix whose mass reaches top_p.
  if (s_.top_p < 1.0f) {
    double mass = 0;
    for (std::int32_t i = 0; i < keep; ++i) {
      mass += probs_[static_cast<std::size_t>(i)];
      if (mass >= static_cast<double>(s_.top_p) * total) {
        keep = i + 1;
        total = mass;
        break;
      }
    }
  }
  const double u = uniform() * total;
  double acc = 0;
  for (std::int32_t i = 0; i < keep; ++i) {
    acc += probs_[static_cast<std::size_t>(i)];
    if (u < acc) return order_[static_cast<std::size_t>(i)];
  }
  return order_[static_cast<std::size_t>(keep - 1)];
}

}  // namespace mxmoe::llm
