// The random numbers of generated weights (LayerStorage::random, `mxmoe synth --full`): one
// generator and one rule for MXFP4 scales, so every generated layer has the same statistics.
#pragma once

#include <cmath>
#include <cstdint>

namespace mxmoe {

// splitmix64: tiny, fast, and good enough to make weights that exercise every code. Draw n of
// a stream is a pure function of (seed, n) (`at`), so a stream can be filled in pieces, in
// parallel, and the bytes do not depend on the piece size.
class Rng {
 public:
  static constexpr std::uint64_t kStep = 0x9E3779B97F4A7C15ull;
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() noexcept { return mix(state_ += kStep); }
  // Uniform in [-1, 1).
  float symmetric() noexcept { return to_symmetric(next()); }
  // What next() returns for the n-th draw (from 0) of Rng(seed).
  static std::uint64_t at(std::uint64_t seed, std::uint64_t n) noexcept {
    return mix(seed + (n + 1) * kStep);
  }
  static float to_symmetric(std::uint64_t r) noexcept {
    return static_cast<float>(static_cast<double>(r >> 11) * 0x1.0p-52 - 1.0);
  }

 private:
  static std::uint64_t mix(std::uint64_t z) noexcept {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::uint64_t state_;
};

// E8M0 scales of random MXFP4 rows of COLS columns (all 16 E2M1 codes equally likely) are
// 127 + c - 1 .. 127 + c + 1, where 2^c ~ 1 / (rms(E2M1) * sqrt(cols)): a row's dot product
// with a unit-variance input is then O(1) whatever the width. This is 127 + c - 1.
inline int mxfp4_random_scale_base(std::int64_t cols) {
  constexpr double kE2m1Rms = 2.9261;  // sqrt(mean of the 16 codes' squared values)
  return 127 - 1 +
         static_cast<int>(std::lround(-std::log2(kE2m1Rms * std::sqrt(static_cast<double>(cols)))));
}

}  // namespace mxmoe
