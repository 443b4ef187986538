// MXFP4 nibble orders (gpt-oss <-> ggml) and the vectorized decoders (bit-identical to the
// scalar decoder on every variant this CPU can run).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "format/mxfp4_dequant_kernels.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe {
namespace {

using Block = std::array<std::uint8_t, kMxfp4BlockBytes>;

// Element i of the hand-worked block has code i % 16.
//   gpt-oss: byte j = code(2j) | code(2j+1) << 4 -> 0x10, 0x32, ..., 0xFE, then again.
//   ggml:    byte j = code(j)  | code(j+16) << 4 -> 0x00, 0x11, ..., 0xFF.
TEST(Mxfp4Layout, HandWorkedExample) {
  Block gpt_oss{}, ggml{};
  for (std::size_t j = 0; j < 16; ++j) {
    gpt_oss[j] = static_cast<std::uint8_t>(((2 * j) % 16) | (((2 * j + 1) % 16) << 4));
    ggml[j] = static_cast<std::uint8_t>(j * 0x11);
  }
  EXPECT_EQ(gpt_oss[0], 0x10);
  EXPECT_EQ(gpt_oss[7], 0xFE);
  EXPECT_EQ(gpt_oss[8], 0x10);
  Block converted{};
  mxfp4_block_to_ggml(gpt_oss.data(), converted.data());
  EXPECT_EQ(converted, ggml);
  mxfp4_block_from_ggml(ggml.data(), converted.data());
  EXPECT_EQ(converted, gpt_oss);
}

TEST(Mxfp4Layout, ConversionsAreInverseAndPreserveElements) {
  std::mt19937_64 rng(51);
  std::uniform_int_distribution<unsigned> byte(0, 255);
  for (int trial = 0; trial < 1000; ++trial) {
    Block original{}, ggml{}, back{};
    for (auto& b : original) b = static_cast<std::uint8_t>(byte(rng));
    mxfp4_block_to_ggml(original.data(), ggml.data());
    mxfp4_block_from_ggml(ggml.data(), back.data());
    ASSERT_EQ(back, original);
    for (std::size_t i = 0; i < kMxBlock; ++i) {
      const unsigned in_gpt_oss = (unsigned{original[i / 2]} >> (4 * (i % 2))) & 0xFu;
      const unsigned in_ggml = (unsigned{ggml[i % 16]} >> (4 * (i / 16))) & 0xFu;
      ASSERT_EQ(in_gpt_oss, in_ggml) << "element " << i;
    }
    mxfp4_block_to_ggml(ggml.data(), back.data());    // and the other way round
    mxfp4_block_from_ggml(back.data(), back.data());  // in place is allowed
    ASSERT_EQ(back, ggml);
  }
}

// Random packed bytes (every code) and scales that include 0 (subnormal 2^-127 scale),
// 0xFF (NaN), and 254/253 (products overflow to Inf).
struct RandomRow {
  std::vector<std::uint8_t> packed, scales;
};
RandomRow random_row(std::mt19937_64& rng, std::size_t blocks) {
  std::uniform_int_distribution<unsigned> byte(0, 255);
  RandomRow row{std::vector<std::uint8_t>(blocks * kMxfp4BlockBytes),
                std::vector<std::uint8_t>(blocks)};
  for (auto& b : row.packed) b = static_cast<std::uint8_t>(byte(rng));
  const std::uint8_t specials[] = {0, 1, 0xFF, 254, 253, 127};
  for (std::size_t b = 0; b < blocks; ++b) {
    row.scales[b] = b < std::size(specials) ? specials[b] : static_cast<std::uint8_t>(byte(rng));
  }
  std::shuffle(row.scales.begin(), row.scales.end(), rng);
  return row;
}

template <class Decode>  // (packed, scales, blocks, out), as format_detail::Mxfp4DequantFn
void expect_bit_identical_to_scalar(Decode decode) {
  std::mt19937_64 rng(52);
  for (std::size_t blocks : {1u, 2u, 3u, 7u, 16u, 90u, 91u, 1000u}) {
    const RandomRow row = random_row(rng, blocks);
    std::vector<float> expected(blocks * kMxBlock), actual(blocks * kMxBlock, 1.0f);
    dequantize_mxfp4(row.packed, row.scales, expected);
    decode(row.packed.data(), row.scales.data(), blocks, actual.data());
    ASSERT_EQ(std::memcmp(expected.data(), actual.data(), expected.size() * sizeof(float)), 0)
        << blocks << " blocks";
  }
}

// The public entry with each decoder this CPU runs gives the scalar bits; one it cannot run
// is refused with a message, never executed (MXMOE_MAX_ISA's choice is the caller's:
// fastest_mxfp4_decoder, tests/hw).
TEST(Mxfp4FastDequant, EveryDecoderOfThePublicEntryMatchesScalarBitForBit) {
  const std::pair<Mxfp4Decoder, bool> decoders[] = {
      {Mxfp4Decoder::portable, true},
      {Mxfp4Decoder::avx2, format_detail::cpu_has_avx2()},
      {Mxfp4Decoder::avx512, format_detail::cpu_has_avx512()}};
  std::vector<std::uint8_t> packed(16), scales(1, 127);
  std::vector<float> out(32);
  for (const auto& [decoder, runs] : decoders) {
    SCOPED_TRACE(static_cast<int>(decoder));
    if (!runs) {
      EXPECT_THROW(dequantize_mxfp4_fast(packed, scales, out, decoder), std::invalid_argument);
      continue;
    }
    expect_bit_identical_to_scalar([decoder](const std::uint8_t* p, const std::uint8_t* s,
                                             std::size_t blocks, float* o) {
      dequantize_mxfp4_fast({p, blocks * kMxfp4BlockBytes}, {s, blocks}, {o, blocks * kMxBlock},
                            decoder);
    });
  }
  EXPECT_THROW(dequantize_mxfp4_fast(packed, scales, out, static_cast<Mxfp4Decoder>(7)),
               std::invalid_argument);
}

TEST(Mxfp4FastDequant, Avx2MatchesScalarBitForBit) {
  if (!format_detail::cpu_has_avx2()) GTEST_SKIP() << "CPU without AVX2";
  expect_bit_identical_to_scalar(format_detail::dequantize_mxfp4_rows_avx2);
}

TEST(Mxfp4FastDequant, Avx512MatchesScalarBitForBit) {
  if (!format_detail::cpu_has_avx512()) GTEST_SKIP() << "CPU without AVX-512";
  expect_bit_identical_to_scalar(format_detail::dequantize_mxfp4_rows_avx512);
}

TEST(Mxfp4FastDequant, EmptyRowIsFine) {
  std::vector<std::uint8_t> none;
  std::vector<float> out;
  EXPECT_NO_THROW(dequantize_mxfp4_fast(none, none, out, Mxfp4Decoder::portable));
}

}  // namespace
}  // namespace mxmoe
