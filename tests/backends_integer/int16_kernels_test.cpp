// The avx2_int16 kernels alone, bit for bit (src/backends/integer/int16_kernels.hpp): the AVX2
// bf16 -> int16 block quantizer against a scalar model of the definition written here in
// double, the portable rounding of the float64 evaluator against both, and the vpmaddwd GEMM
// against a scalar loop that spells out the per-block order. Exact equality is the right bar:
// the quantizer's scalings are exact powers of two with one rounding to nearest even, the
// int32 block dots are exact and the epilogue is the same single-rounding fma per block.
#include "backends/integer/int16_kernels.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "format/activation_rounding.hpp"
#include "mxmoe/format.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe {
namespace {

namespace k16 = int16_kernels;
namespace k = int8_kernels;

bool has_avx2() {
  static const IsaFeatures isa = probe_hardware().isa;
  return isa.avx2 && isa.fma && isa.f16c;
}

// The definition, one block at a time, in double (every step exact but the one RNE):
// b = bf16(x); a block with Inf/NaN: d = NaN, q = 0; all zero: d = 0, q = 0; else with
// e = floor(log2 max|b|): q = RNE(b * 2^(14-e)), d = 2^(e-14).
struct Block16 {
  std::int16_t q[32];
  double d;  // NaN for a non-finite block
  std::int32_t corr;
};
Block16 model_block(const float* x) {
  Block16 r{};
  double b[32];
  double top = 0;
  bool finite = true;
  for (int i = 0; i < 32; ++i) {
    b[i] = static_cast<double>(bf16_to_f32(f32_to_bf16(x[i])));
    finite = finite && std::isfinite(b[i]);
    top = std::max(top, std::fabs(b[i]));
  }
  if (!finite || top == 0) {
    r.d = finite ? 0.0 : std::numeric_limits<double>::quiet_NaN();
    return r;
  }
  int e = 0;
  std::frexp(top, &e);  // top = m * 2^e, m in [0.5, 1): floor(log2 top) = e - 1
  e -= 1;
  int sum = 0;
  for (int i = 0; i < 32; ++i) {
    const double scaled = std::ldexp(b[i], 14 - e);
    double q = std::floor(scaled);
    const double rest = scaled - q;  // exact
    if (rest > 0.5 || (rest == 0.5 && std::fmod(q, 2.0) != 0)) q += 1;
    r.q[i] = static_cast<std::int16_t>(q);
    sum += r.q[i];
  }
  r.d = std::ldexp(1.0, e - 14);
  r.corr = -12 * sum;
  return r;
}

// Ordinary blocks over the whole float range (subnormal to huge), wide blocks (values from
// 2^-40 to 2^10 of the maximum, so most elements round), then hostile ones: NaN, Inf, -Inf with
// NaN, a float that bf16 rounds up to Inf, the largest bf16, exact ties after scaling (to even
// both ways), bf16 subnormals, float subnormals below bf16's range, negative zeros, values
// whose bf16 rounding carries into the next power of two, and NaNs with large payloads
// (0x7FFFFFFF, 0xFFFF8001, ...), which a rounding add alone carries into +-0 (a review found
// the first kernel doing that).
std::vector<float> quantizer_input() {
  std::mt19937 rng(71);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_int_distribution<int> spread(-40, 0);
  constexpr int kOrdinary = 60, kBlocks = kOrdinary + 14;
  std::vector<float> x(32 * kBlocks);
  for (int b = 0; b < kOrdinary; ++b) {
    const float m = b % 15 == 0 ? 0.0f : std::ldexp(1.0f, (b * 37) % 250 - 125);
    for (int i = 0; i < 32; ++i) {
      float v = m * dist(rng);
      if (b % 2 == 1) v = std::ldexp(v, spread(rng));  // a wide block
      x[static_cast<std::size_t>(32 * b + i)] = v;
    }
  }
  float* h = x.data() + 32 * kOrdinary;
  auto block = [&](int j) { return h + 32 * j; };
  for (int j = 0; j < 14; ++j)
    for (int i = 0; i < 32; ++i) block(j)[i] = 0.001f * static_cast<float>(i + 1);
  block(0)[5] = NAN;
  block(1)[9] = INFINITY;
  block(2)[1] = -INFINITY, block(2)[30] = NAN;
  block(3)[7] = std::numeric_limits<float>::max();  // bf16 rounds it to Inf
  block(4)[0] = bf16_to_f32(0x7F7F);                // the largest finite bf16
  block(4)[1] = -bf16_to_f32(0x7F7F);
  // max 2^14 (e = 14, scale 1): k + 0.5 are ties, to the even neighbour both ways.
  for (int i = 0; i < 32; ++i) block(5)[i] = static_cast<float>(i) - 15.5f;
  block(5)[31] = 16384.0f;
  // max 2^22 (scale 2^-8): multiples of 128 exactly halfway between steps of 256.
  for (int i = 0; i < 32; ++i) block(6)[i] = static_cast<float>(128 * (2 * i + 1));
  block(6)[0] = 4194304.0f;
  for (int i = 0; i < 32; ++i) block(7)[i] = std::ldexp(static_cast<float>(i - 16), -133);
  for (int i = 0; i < 32; ++i) block(8)[i] = std::ldexp(static_cast<float>(i), -149);
  for (int i = 0; i < 32; ++i) block(9)[i] = -0.0f;
  for (int i = 0; i < 32; ++i) block(10)[i] = std::nextafter(2.0f, 0.0f) * (i % 2 ? -1.0f : 1.0f);
  for (int i = 0; i < 32; ++i) block(11)[i] = std::ldexp(1.0f, -(i % 30));
  block(12)[3] = std::bit_cast<float>(0x7FFFFFFFu);
  block(12)[4] = std::bit_cast<float>(0xFFFF8001u);
  block(13)[0] = std::bit_cast<float>(0xFFFFFFFFu);
  block(13)[31] = std::bit_cast<float>(0x7FFF8000u);
  return x;
}

TEST(Int16Kernels, Avx2QuantizerGivesTheBitsOfTheDefinition) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2";
  const std::vector<float> x = quantizer_input();
  const std::size_t n = x.size(), blocks = n / 32;
  std::vector<std::int16_t> q(n);
  std::vector<float> d(blocks);
  std::vector<std::int32_t> corr(blocks);
  k16::int16_block32_quantize__avx2(x.data(), static_cast<std::int64_t>(n), q.data(), d.data(),
                                    corr.data());
  std::vector<float> portable(n);
  round_activations_int16_blocks(x, portable);
  int rounded = 0, non_finite = 0;
  for (std::size_t b = 0; b < blocks; ++b) {
    SCOPED_TRACE(b);
    const Block16 want = model_block(x.data() + 32 * b);
    if (std::isnan(want.d)) {
      ++non_finite;
      EXPECT_TRUE(std::isnan(d[b]));
    } else {
      EXPECT_EQ(static_cast<double>(d[b]), want.d);
    }
    EXPECT_EQ(corr[b], want.corr);
    for (std::size_t i = 0; i < 32; ++i) {
      ASSERT_EQ(q[32 * b + i], want.q[i]) << "element " << i << " of " << x[32 * b + i];
      const float v = portable[32 * b + i];
      if (std::isnan(want.d)) {
        EXPECT_TRUE(std::isnan(v));
      } else {
        EXPECT_EQ(static_cast<double>(v), want.q[i] * want.d) << "element " << i;
        rounded +=
            static_cast<double>(v) != static_cast<double>(bf16_to_f32(f32_to_bf16(x[32 * b + i])));
      }
    }
  }
  EXPECT_EQ(non_finite, 6);
  EXPECT_GT(rounded, 100) << "the wide blocks must exercise the int16 rounding";
}

// A packed group with random codes and scale codes from the whole E8M0 range.
std::vector<std::uint8_t> random_group(int blocks, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> scale(100, 140);
  std::vector<std::uint8_t> g(static_cast<std::size_t>(blocks) * group16::kBlockBytes);
  for (auto& v : g) v = static_cast<std::uint8_t>(byte(rng));
  for (int b = 0; b < blocks; ++b)
    for (int i = 0; i < 16; ++i)
      g[static_cast<std::size_t>(b) * group16::kBlockBytes + group16::kNibbleBytes +
        static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i < 3    ? i
                                                                 : i == 3 ? 254
                                                                          : scale(rng));
  return g;
}

struct Rows16 {
  std::vector<std::int16_t> q;
  std::vector<float> d;
  std::vector<std::int32_t> corr;
  std::int64_t cols = 0;
  k16::QuantRows16 rows() const { return {q.data(), d.data(), corr.data(), cols, cols / 32}; }
};

// Quantized by the definition (model_block), block magnitudes over 2^-30 .. 2^10.
Rows16 random_rows(int tokens, int cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_int_distribution<int> magnitude(-30, 10);
  Rows16 a;
  a.cols = cols;
  for (int t = 0; t < tokens; ++t) {
    for (int b = 0; b < cols / 32; ++b) {
      float x[32];
      const float m = std::ldexp(1.0f, magnitude(rng));
      for (float& v : x) v = m * dist(rng);
      const Block16 blk = model_block(x);
      a.q.insert(a.q.end(), blk.q, blk.q + 32);
      a.d.push_back(static_cast<float>(blk.d));
      a.corr.push_back(blk.corr);
    }
  }
  return a;
}

constexpr float kDoubledE2m1[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The documented order: acc = fma(float(dot_b) * d_b, 2^(e-128), acc) for b = 0, 1, ...
std::vector<float> scalar_gemm16(const std::vector<std::uint8_t>& group, int blocks,
                                 const Rows16& a, int tokens) {
  std::vector<float> out(static_cast<std::size_t>(tokens * 16));
  for (int t = 0; t < tokens; ++t) {
    for (int i = 0; i < 16; ++i) {
      float acc = 0.0f;
      for (int b = 0; b < blocks; ++b) {
        const std::uint8_t* gb = group.data() + static_cast<std::size_t>(b) * group16::kBlockBytes;
        std::int64_t dot = 0;
        for (int kk = 0; kk < 32; ++kk) {
          const int h = kk / 8, j = kk % 8;
          const std::uint8_t byte = gb[64 * h + 4 * i + j % 4];
          const int code = j < 4 ? (byte & 0x0F) : (byte >> 4);
          dot += static_cast<std::int64_t>(kDoubledE2m1[code]) *
                 a.q[static_cast<std::size_t>(t * a.cols + 32 * b + kk)];
        }
        const float ws =
            std::ldexp(1.0f, gb[group16::kNibbleBytes + static_cast<std::size_t>(i)] - 128);
        const float in_x =
            static_cast<float>(dot) * a.d[static_cast<std::size_t>(t * a.cols / 32 + b)];
        acc = std::fma(in_x, ws, acc);
      }
      out[static_cast<std::size_t>(t * 16 + i)] = acc;
    }
  }
  return out;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
        << "element " << i << ": " << got[i] << " vs " << want[i];
}

// Every token count from 1 to 13 (tiles of 8 and 4, each tail of 1-3) and 23 (8 + 8 + 4 + 3),
// with an output stride wider than the 16 rows.
TEST(Int16Kernels, Avx2GemmFollowsTheScalarOrderBitForBit) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(73);
  constexpr int kBlocks = 6, kStride = 40;
  const auto group = random_group(kBlocks, rng);
  const Rows16 a = random_rows(23, 32 * kBlocks, rng);
  for (int tokens = 1; tokens <= 23; tokens += tokens < 13 ? 1 : 10) {
    SCOPED_TRACE(tokens);
    std::vector<float> out(static_cast<std::size_t>(tokens * kStride), -1.0f);
    k16::int16_block32_gemm_16x8__avx2(group.data(), kBlocks, a.rows(), tokens, out.data(),
                                       kStride);
    std::vector<float> rows;
    for (int t = 0; t < tokens; ++t)
      rows.insert(rows.end(), out.begin() + t * kStride, out.begin() + t * kStride + 16);
    expect_same_bits(rows, scalar_gemm16(group, kBlocks, a, tokens));
    for (int t = 0; t < tokens; ++t)  // nothing written past the 16 rows
      EXPECT_EQ(out[static_cast<std::size_t>(t * kStride + 16)], -1.0f);
  }
}

// The extremes of the exact int32 sums: every weight at +-6 (codes 7 and 15, biased 24 and 0)
// against activations at +-32640 (the largest |q|): pairs reach 2 * 24 * 32640 and a row's
// block sum 32 * 24 * 32640 < 2^25, and the true dot 32 * 12 * 32640 < 2^24 (exact in float).
TEST(Int16Kernels, Avx2GemmSumsStayExactAtTheExtremes) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2";
  constexpr int kBlocks = 2;
  for (const std::uint8_t code : {std::uint8_t{0x77}, std::uint8_t{0xFF}}) {
    for (const std::int16_t xv : {std::int16_t{32640}, std::int16_t{-32640}}) {
      std::vector<std::uint8_t> group(kBlocks * group16::kBlockBytes, code);
      for (int b = 0; b < kBlocks; ++b)
        for (int i = 0; i < 16; ++i)
          group[static_cast<std::size_t>(b) * group16::kBlockBytes + group16::kNibbleBytes +
                static_cast<std::size_t>(i)] = 128;  // 2^0
      Rows16 a;
      a.cols = 32 * kBlocks;
      a.q.assign(static_cast<std::size_t>(a.cols), xv);
      a.d.assign(kBlocks, 1.0f);
      a.corr.assign(kBlocks, -12 * 32 * xv);
      std::vector<float> out(16);
      k16::int16_block32_gemm_16x8__avx2(group.data(), kBlocks, a.rows(), 1, out.data(), 16);
      const double want = (code == 0x77 ? 12.0 : -12.0) * xv * 32 * kBlocks;
      for (float v : out) EXPECT_EQ(static_cast<double>(v), want);
      expect_same_bits(out, scalar_gemm16(group, kBlocks, a, 1));
    }
  }
}

// Tokens far below unit scale: a block's dot in activation units times the weight scale is
// still a float (about 2^-140 here) where the product of the two scales alone (2^-154) is not;
// the epilogue multiplies the dot first, so these contributions survive, within float
// precision of the float64 value.
TEST(Int16Kernels, TinyTokensKeepProductsTheScalesAloneWouldFlush) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(83);
  constexpr int kBlocks = 2;
  auto group = random_group(kBlocks, rng);
  for (int b = 0; b < kBlocks; ++b)
    for (int i = 0; i < 16; ++i)
      group[static_cast<std::size_t>(b) * group16::kBlockBytes + group16::kNibbleBytes +
            static_cast<std::size_t>(i)] = 88;  // 2^-40
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(32 * kBlocks);
  for (float& v : x) v = std::ldexp(dist(rng), -100);
  Rows16 a;
  a.cols = 32 * kBlocks;
  a.q.resize(x.size());
  a.d.resize(kBlocks);
  a.corr.resize(kBlocks);
  k16::int16_block32_quantize__avx2(x.data(), a.cols, a.q.data(), a.d.data(), a.corr.data());
  ASSERT_LT(static_cast<double>(a.d[0]) * 0x1p-40, 0x1p-149) << "the scales alone must flush";
  std::vector<float> out(16);
  k16::int16_block32_gemm_16x8__avx2(group.data(), kBlocks, a.rows(), 1, out.data(), 16);
  expect_same_bits(out, scalar_gemm16(group, kBlocks, a, 1));
  for (int i = 0; i < 16; ++i) {
    double want = 0;  // the float64 value of the rounded inputs
    for (int b = 0; b < kBlocks; ++b)
      for (int kk = 0; kk < 32; ++kk) {
        const std::uint8_t* gb = group.data() + static_cast<std::size_t>(b) * group16::kBlockBytes;
        const std::uint8_t byte = gb[64 * (kk / 8) + 4 * i + (kk % 8) % 4];
        const int code = kk % 8 < 4 ? (byte & 0x0F) : (byte >> 4);
        want += static_cast<double>(kDoubledE2m1[code]) * 0x1p-40 *
                a.q[static_cast<std::size_t>(32 * b + kk)] *
                static_cast<double>(a.d[static_cast<std::size_t>(b)]);
      }
    const double got = out[static_cast<std::size_t>(i)];
    EXPECT_NE(got, 0.0) << "row " << i;
    EXPECT_NEAR(got, want, 0x1p-148 + 1e-3 * std::fabs(want)) << "row " << i;
  }
}

// A NaN block scale (a block that held Inf or NaN) makes the token's outputs NaN, on every
// tile size, and leaves the other tokens alone.
TEST(Int16Kernels, ANonFiniteBlockPoisonsOnlyItsToken) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(79);
  constexpr int kBlocks = 3, kTokens = 9;
  auto group = random_group(kBlocks, rng);
  for (int b = 0; b < kBlocks; ++b)  // ordinary scales: no overflow to Inf - Inf elsewhere
    for (int i = 0; i < 16; ++i)
      group[static_cast<std::size_t>(b) * group16::kBlockBytes + group16::kNibbleBytes +
            static_cast<std::size_t>(i)] = 120;
  std::vector<float> x(static_cast<std::size_t>(kTokens * 32 * kBlocks));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  x[static_cast<std::size_t>(4 * 32 * kBlocks + 40)] = INFINITY;  // token 4, block 1
  Rows16 a;
  a.cols = 32 * kBlocks;
  a.q.resize(x.size());
  a.d.resize(x.size() / 32);
  a.corr.resize(a.d.size());
  k16::int16_block32_quantize__avx2(x.data(), static_cast<std::int64_t>(x.size()), a.q.data(),
                                    a.d.data(), a.corr.data());
  std::vector<float> out(kTokens * 16);
  k16::int16_block32_gemm_16x8__avx2(group.data(), kBlocks, a.rows(), kTokens, out.data(), 16);
  for (int t = 0; t < kTokens; ++t)
    for (int i = 0; i < 16; ++i)
      EXPECT_EQ(std::isnan(out[static_cast<std::size_t>(t * 16 + i)]), t == 4)
          << "token " << t << " row " << i;
}

}  // namespace
}  // namespace mxmoe
