// The int8 kernels alone, bit for bit: the SIMD quantizers (AVX-512, AVX2) against
// quantize_int8_block32, the VNNI, AMX, AVX2 and AVX-VNNI 16-row GEMMs against a scalar loop
// that spells out the fixed per-block order and operations (int8_kernels.hpp), and the AVX2
// GLU + requantization against the AVX-512 one. Exact equality is the right bar: the int32 block
// dots are exact and every float operation is the same single-rounding operation.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backends/integer/int8_kernels.hpp"
#include "hw/amx_permission.hpp"
#include "mxmoe/format.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe {
namespace {

namespace k = int8_kernels;

bool has_vnni() {
  static const IsaFeatures isa = probe_hardware().isa;
  return isa.avx512f && isa.avx512bw && isa.avx512vl && isa.avx512dq && isa.avx512_vnni;
}
bool has_avx2() {
  static const IsaFeatures isa = probe_hardware().isa;
  return isa.avx2 && isa.fma && isa.f16c;
}
bool has_avx_vnni() {
  return has_avx2() && probe_hardware().isa.avx_vnni;
}
bool has_amx() {
  static const bool ok =
      has_vnni() && probe_hardware().isa.amx_int8 && hw::request_amx_tile_permission().empty();
  return ok;
}

constexpr float kDoubledE2m1[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Quantized activation rows as the kernels expect them (q, d, corr = -12 * block sum).
struct Activations {
  std::vector<std::int8_t> q;
  std::vector<float> d;
  std::vector<std::int32_t> corr;
  std::int64_t cols = 0;
  k::QuantRows rows() const { return {q.data(), d.data(), corr.data(), cols, cols / 32}; }
};

Activations random_activations(int tokens, int cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_int_distribution<int> magnitude(-30, 10);
  Activations a;
  a.cols = cols;
  a.q.resize(static_cast<std::size_t>(tokens * cols));
  a.d.resize(static_cast<std::size_t>(tokens * cols / 32));
  a.corr.resize(a.d.size());
  std::vector<float> x(static_cast<std::size_t>(cols));
  for (int t = 0; t < tokens; ++t) {
    for (int b = 0; b < cols / 32; ++b) {  // block magnitudes spread over 2^-30 .. 2^10
      const float m = std::ldexp(1.0f, magnitude(rng));
      for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(32 * b + i)] = m * dist(rng);
    }
    const auto off = static_cast<std::size_t>(t * cols);
    quantize_int8_block32(x, {a.q.data() + off, static_cast<std::size_t>(cols)},
                          {a.d.data() + off / 32, static_cast<std::size_t>(cols / 32)});
    for (int b = 0; b < cols / 32; ++b) {
      int sum = 0;
      for (int i = 0; i < 32; ++i) sum += a.q[off + static_cast<std::size_t>(32 * b + i)];
      a.corr[off / 32 + static_cast<std::size_t>(b)] = -12 * sum;
    }
  }
  return a;
}

// A packed group with random codes; scale codes from the whole E8M0 range, tiny ones included.
std::vector<std::uint8_t> random_group(int blocks, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> scale(100, 140);
  std::vector<std::uint8_t> g(static_cast<std::size_t>(blocks) * group16::kBlockBytes);
  for (auto& v : g) v = static_cast<std::uint8_t>(byte(rng));
  for (int b = 0; b < blocks; ++b) {
    for (int i = 0; i < 16; ++i) {
      auto& e = g[static_cast<std::size_t>(b) * group16::kBlockBytes + group16::kNibbleBytes +
                  static_cast<std::size_t>(i)];
      // 0, 1, 2: subnormal scales; 200; 254 and 255 (the largest, 2^126 and 2^127 halved).
      e = static_cast<std::uint8_t>(i < 3    ? i
                                    : i == 3 ? 200
                                    : i == 4 ? 254
                                    : i == 5 ? 255
                                             : scale(rng));
    }
  }
  return g;
}

// The documented order: acc = fma(float(dot_b), 2^(e-128) * d_b, acc) for b = 0, 1, ...
std::vector<float> scalar_gemm16(const std::vector<std::uint8_t>& group, int blocks,
                                 const Activations& a, int tokens) {
  std::vector<float> out(static_cast<std::size_t>(tokens * 16));
  for (int t = 0; t < tokens; ++t) {
    for (int i = 0; i < 16; ++i) {
      float acc = 0.0f;
      for (int b = 0; b < blocks; ++b) {
        const std::uint8_t* gb = group.data() + static_cast<std::size_t>(b) * group16::kBlockBytes;
        int dot = 0;
        for (int kk = 0; kk < 32; ++kk) {
          const int h = kk / 8, j = kk % 8;
          const std::uint8_t byte = gb[64 * h + 4 * i + j % 4];
          const int code = j < 4 ? (byte & 0x0F) : (byte >> 4);
          dot += static_cast<int>(kDoubledE2m1[code]) *
                 a.q[static_cast<std::size_t>(t * a.cols + 32 * b + kk)];
        }
        const float ws =
            std::ldexp(1.0f, gb[group16::kNibbleBytes + static_cast<std::size_t>(i)] - 128);
        const float scale = ws * a.d[static_cast<std::size_t>(t * a.cols / 32 + b)];
        acc = std::fma(static_cast<float>(dot), scale, acc);
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

using Quantizer = void (*)(const float*, std::int64_t, std::int8_t*, float*,
                           std::int32_t*) noexcept;

// Blocks of every kind: zero, subnormal-sized, huge and ordinary magnitudes, then hostile ones:
// a NaN, an Inf, -Inf with NaN, the largest finite floats, values exactly halfway between two
// steps (ties to even), and a block whose amax is subnormal (1/d overflows to Inf).
std::vector<float> quantizer_input() {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  constexpr int kBlocks = 48;
  std::vector<float> x(32 * kBlocks);
  for (int b = 0; b < 40; ++b) {
    const float m = b % 10 == 0 ? 0.0f : std::ldexp(1.0f, (b * 37) % 250 - 140);
    for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(32 * b + i)] = m * dist(rng);
  }
  float* h = x.data() + 32 * 40;
  h[5] = NAN;                                                                 // block 40
  h[32 + 9] = INFINITY;                                                       // block 41
  h[64 + 1] = -INFINITY, h[64 + 30] = NAN;                                    // block 42
  for (int i = 0; i < 32; ++i) h[96 + i] = (i % 2 ? -1.0f : 1.0f) * 3.4e38f;  // block 43
  for (int i = 0; i < 32; ++i) h[128 + i] = (static_cast<float>(i) - 15.5f);  // block 44: x.5
  h[128 + 31] = 127.0f;  // amax 127: d = 1, so every x.5 element is a tie
  for (int i = 0; i < 32; ++i) h[160 + i] = std::ldexp(static_cast<float>(i - 16), -149);
  for (int i = 0; i < 32; ++i) h[192 + i] = -0.0f;  // block 46: negative zeros
  for (int i = 0; i < 32; ++i) h[224 + i] = std::nextafter(1.0f, 2.0f) * static_cast<float>(i);
  return x;
}

void expect_quantizer_bits(Quantizer quantize) {
  const std::vector<float> x = quantizer_input();
  const std::size_t n = x.size(), blocks = n / 32;
  std::vector<std::int8_t> q(n), want_q(n);
  std::vector<float> d(blocks), want_d(blocks);
  std::vector<std::int32_t> corr(blocks);
  quantize(x.data(), static_cast<std::int64_t>(n), q.data(), d.data(), corr.data());
  quantize_int8_block32(x, want_q, want_d);
  EXPECT_EQ(q, want_q);
  for (std::size_t b = 0; b < blocks; ++b) {
    SCOPED_TRACE(b);
    // A NaN scale (a block with a NaN) compares by NaN-ness: its payload is not specified.
    if (std::isnan(want_d[b])) {
      EXPECT_TRUE(std::isnan(d[b]));
    } else {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(d[b]), std::bit_cast<std::uint32_t>(want_d[b]));
    }
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += want_q[32 * b + static_cast<std::size_t>(i)];
    EXPECT_EQ(corr[b], -12 * sum);
  }
}

TEST(Int8Kernels, QuantizerGivesTheBitsOfTheFormatDefinition) {
  if (!has_vnni()) GTEST_SKIP() << "no AVX-512 VNNI";
  expect_quantizer_bits(&k::int8_block32_quantize__avx512_vnni);
}

TEST(Int8Kernels, Avx2QuantizerGivesTheBitsOfTheFormatDefinition) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2";
  expect_quantizer_bits(&k::int8_block32_quantize__avx2);
}

TEST(Int8Kernels, VnniGemmFollowsTheScalarOrderBitForBit) {
  if (!has_vnni()) GTEST_SKIP() << "no AVX-512 VNNI";
  std::mt19937 rng(11);
  constexpr int kBlocks = 5, kTokens = 23;  // 4-token register tiles plus a tail of 3
  const auto group = random_group(kBlocks, rng);
  const Activations a = random_activations(kTokens, 32 * kBlocks, rng);
  std::vector<float> out(kTokens * 16);
  k::int8_block32_gemm_16x8__avx512_vnni(group.data(), kBlocks, a.rows(), kTokens, out.data(), 16);
  expect_same_bits(out, scalar_gemm16(group, kBlocks, a, kTokens));
}

using Gemm16 = void (*)(const std::uint8_t*, int, const k::QuantRows&, int, float*,
                        std::int64_t) noexcept;

// Every token count from 1 to 13 (the ymm kernels' tiles of 8 and 4 and each tail of 1-3) and
// 23 (8 + 8 + 4 + 3), with an output stride wider than the 16 rows.
void expect_gemm_bits(Gemm16 gemm) {
  std::mt19937 rng(17);
  constexpr int kBlocks = 6, kStride = 40;
  const auto group = random_group(kBlocks, rng);
  const Activations a = random_activations(23, 32 * kBlocks, rng);
  for (int tokens = 1; tokens <= 23; tokens += tokens < 13 ? 1 : 10) {
    SCOPED_TRACE(tokens);
    std::vector<float> out(static_cast<std::size_t>(tokens * kStride), -1.0f);
    gemm(group.data(), kBlocks, a.rows(), tokens, out.data(), kStride);
    std::vector<float> rows;
    for (int t = 0; t < tokens; ++t)
      rows.insert(rows.end(), out.begin() + t * kStride, out.begin() + t * kStride + 16);
    expect_same_bits(rows, scalar_gemm16(group, kBlocks, a, tokens));
    for (int t = 0; t < tokens; ++t)  // nothing written past the 16 rows
      EXPECT_EQ(out[static_cast<std::size_t>(t * kStride + 16)], -1.0f);
  }
}

// The extremes of the exact int32 sums: every weight at +-6 (codes 7 and 15, biased 24 and 0)
// against activations at +-127, where vpmaddubsw pairs reach +-6096 and the int16 sums of
// four +-24384 (int8_ymm.hpp): an overflow would show here.
void expect_gemm_extremes(Gemm16 gemm) {
  constexpr int kBlocks = 2;
  for (const std::uint8_t code : {std::uint8_t{0x77}, std::uint8_t{0xFF}}) {
    for (const std::int8_t xv : {std::int8_t{127}, std::int8_t{-127}}) {
      std::vector<std::uint8_t> group(kBlocks * group16::kBlockBytes, code);
      for (int b = 0; b < kBlocks; ++b)
        for (int i = 0; i < 16; ++i)
          group[static_cast<std::size_t>(b) * group16::kBlockBytes + group16::kNibbleBytes +
                static_cast<std::size_t>(i)] = 127;
      Activations a;
      a.cols = 32 * kBlocks;
      a.q.assign(static_cast<std::size_t>(a.cols), xv);
      a.d.assign(kBlocks, 1.0f);
      a.corr.assign(kBlocks, -12 * 32 * xv);
      std::vector<float> out(16);
      gemm(group.data(), kBlocks, a.rows(), 1, out.data(), 16);
      const float want = (code == 0x77 ? 6.0f : -6.0f) * static_cast<float>(xv) * 32 * kBlocks;
      for (float v : out) EXPECT_EQ(v, want);  // 2 x 32 x 12 x 127 x 2^-1, exact
      expect_same_bits(out, scalar_gemm16(group, kBlocks, a, 1));
    }
  }
}

TEST(Int8Kernels, Avx2GemmFollowsTheScalarOrderBitForBit) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2";
  expect_gemm_bits(&k::int8_block32_gemm_16x8__avx2);
  expect_gemm_extremes(&k::int8_block32_gemm_16x8__avx2);
}

// Built here, but this CPU may lack AVX-VNNI (VEX vpdpbusd on ymm): Zen 4 has only the
// AVX-512 form. Then the test skips; the kernel's selection is tested in check_test.cpp.
TEST(Int8Kernels, AvxVnniGemmFollowsTheScalarOrderBitForBit) {
  if (!has_avx_vnni()) GTEST_SKIP() << "this CPU has no AVX-VNNI (vpdpbusd on ymm)";
  expect_gemm_bits(&k::int8_block32_gemm_16x8__avx_vnni);
  expect_gemm_extremes(&k::int8_block32_gemm_16x8__avx_vnni);
}

// The fused GLU + requantization: the AVX2 kernel gives the AVX-512 kernel's bits (q, d, corr)
// for each nonlinearity, on ordinary rows and on hostile ones (NaN, +-Inf, huge, tiny,
// exactly the clamp limit, values that drive e^x to overflow and into the subnormals).
TEST(Int8Kernels, Avx2GluQuantizeGivesTheAvx512Bits) {
  if (!has_vnni() || !has_avx2()) GTEST_SKIP() << "needs AVX-512 and AVX2 to compare";
  std::mt19937 rng(23);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  constexpr int kTokens = 12;
  std::vector<float> h(kTokens * 64), gate_bias(32), up_bias(32);
  for (int t = 0; t < kTokens; ++t) {
    const float m = std::ldexp(1.0f, t * 3 - 12);  // 2^-12 .. 2^21
    for (int i = 0; i < 64; ++i) h[static_cast<std::size_t>(t * 64 + i)] = m * dist(rng);
  }
  float* hostile = h.data() + 64 * (kTokens - 3);
  const float specials[] = {NAN,     INFINITY, -INFINITY, 3.4e38f, -3.4e38f, 1e-45f, -1e-45f,
                            7.0f,    -7.0f,    -52.0f,    -60.0f,  -88.0f,   -95.0f, -100.0f,
                            -120.0f, 88.5f,    95.0f,     120.0f,  0.0f,     -0.0f};
  for (int i = 0; i < 3 * 64; ++i) hostile[i] = specials[static_cast<std::size_t>(i) % 20];
  for (int i = 0; i < 32; ++i) {
    gate_bias[static_cast<std::size_t>(i)] = 0.25f * dist(rng);
    up_bias[static_cast<std::size_t>(i)] = 0.25f * dist(rng);
  }
  for (const int fn : {k::kGluSwigluOai, k::kGluSilu, k::kGluSiluClamp}) {
    SCOPED_TRACE(fn);
    const k::GluParams p{fn, 1.702f, 7.0f};
    std::vector<std::int8_t> q512(kTokens * 32), q2(kTokens * 32);
    std::vector<float> d512(kTokens), d2(kTokens);
    std::vector<std::int32_t> c512(kTokens), c2(kTokens);
    k::int8_block32_glu_quantize__avx512_vnni(h.data(), kTokens, gate_bias.data(), up_bias.data(),
                                              p, q512.data(), d512.data(), c512.data(), 32, 1);
    k::int8_block32_glu_quantize__avx2(h.data(), kTokens, gate_bias.data(), up_bias.data(), p,
                                       q2.data(), d2.data(), c2.data(), 32, 1);
    EXPECT_EQ(q2, q512);
    EXPECT_EQ(c2, c512);
    for (int t = 0; t < kTokens; ++t)
      EXPECT_EQ(std::bit_cast<std::uint32_t>(d2[static_cast<std::size_t>(t)]),
                std::bit_cast<std::uint32_t>(d512[static_cast<std::size_t>(t)]))
          << "token " << t;
  }
}

TEST(Int8Kernels, AmxGemmGivesTheVnniBits) {
  if (!has_amx()) GTEST_SKIP() << "no AMX int8 (or the OS refused the tile permission)";
  std::mt19937 rng(13);
  constexpr int kTokens = 48, kMaxBlocks = 8;
  std::vector<std::int8_t> b_tiles(kMaxBlocks * k::kAmxBTileBytes);
  std::vector<float> scales(kMaxBlocks * 16);
  std::vector<float> out(kTokens * 16);
  alignas(64) std::int32_t c_scratch[k::kAmxCScratchInts];
  // Each run uses the first `blocks` blocks of these (rows keep their full stride).
  const auto group = random_group(kMaxBlocks, rng);
  const Activations a = random_activations(kTokens, 32 * kMaxBlocks, rng);
  // The tile products are software-pipelined two blocks deep: odd and even block counts and
  // the shortest ones exercise every prologue/epilogue of that pipeline.
  for (const int blocks : {1, 2, 3, 7, 8}) {
    SCOPED_TRACE(blocks);
    k::int8_block32_tile_config__amx_int8();
    k::int8_block32_decode_group__amx_int8(group.data(), blocks, b_tiles.data(), scales.data());
    // A partial last tile (45 = 2 x 16 + 13) reads rows 45..47 and must store only 13.
    const int tokens = blocks % 2 == 1 ? 45 : kTokens;
    out.assign(static_cast<std::size_t>(tokens) * 16, 0.0f);
    k::int8_block32_gemm_16x16__amx_int8(b_tiles.data(), scales.data(), blocks, a.rows(), tokens,
                                         out.data(), 16, c_scratch);
    k::int8_block32_tile_release__amx_int8();
    expect_same_bits(out, scalar_gemm16(group, blocks, a, tokens));
  }
}

}  // namespace
}  // namespace mxmoe
