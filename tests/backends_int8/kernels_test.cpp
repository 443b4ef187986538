// The int8 kernels alone, bit for bit: the SIMD quantizer against quantize_int8_block32, and
// the VNNI and AMX 16-row GEMMs against a scalar loop that spells out the fixed per-block
// order and operations (int8_kernels.hpp). Exact equality is the right bar: the int32 block
// dots are exact and every float operation is the same single-rounding operation.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "hw/amx_permission.hpp"
#include "backends/int8/int8_kernels.hpp"
#include "mxmoe/format.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe {
namespace {

namespace k = int8_kernels;

bool has_vnni() {
  static const IsaFeatures isa = probe_hardware().isa;
  return isa.avx512f && isa.avx512bw && isa.avx512vl && isa.avx512dq && isa.avx512_vnni;
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
  std::vector<std::uint8_t> g(static_cast<std::size_t>(blocks) * k::kGroupBlockBytes);
  for (auto& v : g) v = static_cast<std::uint8_t>(byte(rng));
  for (int b = 0; b < blocks; ++b) {
    for (int i = 0; i < 16; ++i) {
      auto& e = g[static_cast<std::size_t>(b) * k::kGroupBlockBytes + k::kGroupNibbleBytes +
                  static_cast<std::size_t>(i)];
      e = static_cast<std::uint8_t>(i < 3 ? i : (i == 3 ? 200 : scale(rng)));  // 0, 1, 2: subnormal
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
        const std::uint8_t* gb = group.data() + static_cast<std::size_t>(b) * k::kGroupBlockBytes;
        int dot = 0;
        for (int kk = 0; kk < 32; ++kk) {
          const int h = kk / 8, j = kk % 8;
          const std::uint8_t byte = gb[64 * h + 4 * i + j % 4];
          const int code = j < 4 ? (byte & 0x0F) : (byte >> 4);
          dot += static_cast<int>(kDoubledE2m1[code]) *
                 a.q[static_cast<std::size_t>(t * a.cols + 32 * b + kk)];
        }
        const float ws =
            std::ldexp(1.0f, gb[k::kGroupNibbleBytes + static_cast<std::size_t>(i)] - 128);
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

TEST(Int8Kernels, QuantizerGivesTheBitsOfTheFormatDefinition) {
  if (!has_vnni()) GTEST_SKIP() << "no AVX-512 VNNI";
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  constexpr int kCols = 32 * 40;
  std::vector<float> x(kCols);
  for (int b = 0; b < 40; ++b) {
    // zero blocks, subnormal-sized, huge and ordinary magnitudes
    const float m = b % 10 == 0 ? 0.0f : std::ldexp(1.0f, (b * 37) % 250 - 140);
    for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(32 * b + i)] = m * dist(rng);
  }
  std::vector<std::int8_t> q(kCols), want_q(kCols);
  std::vector<float> d(kCols / 32), want_d(kCols / 32);
  std::vector<std::int32_t> corr(kCols / 32);
  k::quantize_int8_avx512(x.data(), kCols, q.data(), d.data(), corr.data());
  quantize_int8_block32(x, want_q, want_d);
  EXPECT_EQ(q, want_q);
  for (int b = 0; b < kCols / 32; ++b) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(d[static_cast<std::size_t>(b)]),
              std::bit_cast<std::uint32_t>(want_d[static_cast<std::size_t>(b)]));
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += want_q[static_cast<std::size_t>(32 * b + i)];
    EXPECT_EQ(corr[static_cast<std::size_t>(b)], -12 * sum);
  }
}

TEST(Int8Kernels, VnniGemmFollowsTheScalarOrderBitForBit) {
  if (!has_vnni()) GTEST_SKIP() << "no AVX-512 VNNI";
  std::mt19937 rng(11);
  constexpr int kBlocks = 5, kTokens = 23;  // 4-token register tiles plus a tail of 3
  const auto group = random_group(kBlocks, rng);
  const Activations a = random_activations(kTokens, 32 * kBlocks, rng);
  std::vector<float> out(kTokens * 16);
  k::gemm16_vnni(group.data(), kBlocks, a.rows(), kTokens, out.data(), 16);
  expect_same_bits(out, scalar_gemm16(group, kBlocks, a, kTokens));
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
    k::amx_int8_tile_config();
    k::amx_decode_group(group.data(), blocks, b_tiles.data(), scales.data());
    // A partial last tile (45 = 2 x 16 + 13) reads rows 45..47 and must store only 13.
    const int tokens = blocks % 2 == 1 ? 45 : kTokens;
    out.assign(static_cast<std::size_t>(tokens) * 16, 0.0f);
    k::gemm16_amx(b_tiles.data(), scales.data(), blocks, a.rows(), tokens, out.data(), 16,
                  c_scratch);
    k::amx_int8_tile_release();
    expect_same_bits(out, scalar_gemm16(group, blocks, a, tokens));
  }
}

}  // namespace
}  // namespace mxmoe
