// mxmoe::DenseLinear (include/mxmoe/dense.hpp), the public face of dense::Linear that the vLLM
// plugin's batch-invariant matmuls call: the same bits as the internal Linear it wraps, a row's
// bits the same alone and in a batch, and a refusal that names the matrix.
#include "mxmoe/dense.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/dense/dense_linear.hpp"
#include "base/thread_pool.hpp"
#include "runtime/bind_linear.hpp"
#include "test_runtime.hpp"

namespace {

using mxmoe::DenseLinear;
using mxmoe::DenseMatrix;
using mxmoe::ElementType;

TEST(DensePublic, SameBitsAsTheLinearItWrapsAndRowInvariant) {
  constexpr std::int64_t kOut = 37, kIn = 100, kRows = 6;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(kOut * kIn), bias(kOut), x(kRows * kIn);
  for (float& v : w) v = normal(rng);
  for (float& v : bias) v = normal(rng);
  for (float& v : x) v = normal(rng);
  const DenseMatrix m{"proj", ElementType::f32, w.data(), kOut, kIn, bias.data(), ElementType::f32};
  const mxmoe::Hardware hw = mxmoe::probe_hardware();
  const DenseLinear lin(m, hw);
  EXPECT_EQ(lin.in(), kIn);
  EXPECT_EQ(lin.out(), kOut);
  EXPECT_FALSE(lin.kernel().empty());

  std::vector<float> y(kRows * kOut);
  lin.forward(x.data(), kRows, y.data(), mxmoe::testing::test_runtime(2));
  const mxmoe::dense::Linear inner = mxmoe::bind_linear(
      {"proj", ElementType::f32, w.data(), kOut, kIn, bias.data(), ElementType::f32},
      mxmoe::dense::DenseMode::as_published, hw);
  mxmoe::ThreadPool pool(1);
  std::vector<float> want(kRows * kOut);
  inner.forward(x.data(), kRows, want.data(), pool);
  EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0);

  for (std::int64_t r = 0; r < kRows; ++r) {  // each row alone
    std::vector<float> one(kOut);
    lin.forward(x.data() + r * kIn, 1, one.data(), mxmoe::testing::test_runtime(1));
    EXPECT_EQ(std::memcmp(one.data(), y.data() + r * kOut, one.size() * sizeof(float)), 0) << r;
    for (std::int64_t o = 0; o < kOut; ++o) {  // and near float64 (in/16 + 6 roundings)
      double exact = bias[static_cast<std::size_t>(o)], magnitude = std::fabs(exact);
      for (std::int64_t k = 0; k < kIn; ++k) {
        const double p = double{w[static_cast<std::size_t>(o * kIn + k)]} *
                         double{x[static_cast<std::size_t>(r * kIn + k)]};
        exact += p;
        magnitude += std::fabs(p);
      }
      EXPECT_NEAR(one[static_cast<std::size_t>(o)], exact, 13 * std::ldexp(magnitude, -24));
    }
  }
}

TEST(DensePublic, ARefusalNamesTheMatrix) {
  const DenseMatrix m{"model.layers.3.self_attn.q_proj", ElementType::f32, nullptr, 4, 4};
  try {
    const DenseLinear lin(m, mxmoe::probe_hardware());
    FAIL() << "a null matrix was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.3.self_attn.q_proj"), std::string::npos)
        << e.what();
  }
}

}  // namespace
