// The dense expert's dot products (backends/common/dense_dot.hpp): the AVX2 kernel gives the
// portable code's bits for every tile shape and weight type, on hostile values (subnormal,
// huge, mixed signs), and both equal a float64 sum within float32 accumulation.
#include "backends/common/dense_dot.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "mxmoe/format.hpp"
#include "mxmoe/hardware.hpp"

namespace {

using mxmoe::dense::DenseRows;

bool avx2_here() {
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  return mxmoe::isa_feature(hw.isa, "avx2").value_or(false) &&
         mxmoe::isa_feature(hw.isa, "fma").value_or(false);
}

TEST(DenseDot, Avx2GivesThePortableBits) {
  if (!avx2_here()) GTEST_SKIP() << "no AVX2+FMA";
  const std::int64_t k = 96;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> wf(2 * k), x(4 * k);
  for (float& v : wf) v = normal(rng);
  for (float& v : x) v = normal(rng);
  wf[3] = 1e-40f;  // subnormal weight
  wf[10] = 3e30f;  // huge
  x[17] = -2e-39f;
  x[k + 5] = 1e20f;
  std::vector<std::uint16_t> wb(wf.size());
  for (std::size_t i = 0; i < wf.size(); ++i) wb[i] = mxmoe::f32_to_bf16(wf[i]);
  const float* rows[4] = {x.data(), x.data() + k, x.data() + 2 * k, x.data() + 3 * k};
  for (const bool bf16 : {false, true}) {
    const DenseRows w{bf16 ? static_cast<const void*>(wb.data()) : wf.data(), bf16, k, k};
    for (int r = 1; r <= 2; ++r)
      for (int t = 1; t <= 4; ++t) {
        float a[8], b[8];
        mxmoe::dense::dense_expert_dot_2x4__portable(w, r, rows, t, a);
        mxmoe::dense::dense_expert_dot_2x4__avx2(w, r, rows, t, b);
        EXPECT_EQ(std::memcmp(a, b, sizeof(float) * static_cast<std::size_t>(r * t)), 0)
            << "rows " << r << " tokens " << t << (bf16 ? " bf16" : " f32");
        for (int n = 0; n < r; ++n)
          for (int j = 0; j < t; ++j) {
            double want = 0, magnitude = 0;
            for (std::int64_t i = 0; i < k; ++i) {
              const double wv = bf16 ? mxmoe::bf16_to_f32(wb[static_cast<std::size_t>(n * k + i)])
                                     : wf[static_cast<std::size_t>(n * k + i)];
              want += wv * static_cast<double>(rows[j][i]);
              magnitude += std::fabs(wv * static_cast<double>(rows[j][i]));
            }
            // float32 accumulation of k products: each partial sum off by <= 2^-24 of the sum
            // of magnitudes, k steps.
            EXPECT_NEAR(static_cast<double>(a[n * t + j]), want,
                        magnitude * static_cast<double>(k) * 0x1p-24)
                << n << " " << j;
          }
      }
  }
}

}  // namespace
