// The amx_bf16 kernels (src/backends/amx_bf16/bf16_amx_kernels.hpp: bf16_amx_tiles_<op>[_<tile>]
// __amx_bf16, named below by their op) one by one, then the whole backend at extreme scale codes.
//  - decode_group: every B-tile element is the scalar codec's value bit for bit: folded,
//    e2m1_decode(code) x e8m0_decode(e) in float64 (exact in bf16 for 64 <= e <= 250, so the
//    check is exact); unfolded, the bare E2M1 value with the scale 2^(e-127) kept aside as an
//    exact float. Both zero codes (+0 and -0) decode to +0, as the header documents.
//  - gemm_32x32: every output against a float64 dot product of the same bf16 activations and
//    the exact weights (tolerance at kernel level: see gemm_bound), for 1..32 token rows, both
//    folded groups and mixed folded/unfolded pairs; a token's bits must not depend on the rows
//    that share its tile, nor on whether the groups were decoded before or inside the K loop
//    (into whole-group buffers, which must then hold decode_group's tiles, or into rings);
//    an unfolded group's bits are exactly the documented fma chain over its blocks.
//  - round_rows: bit for bit mxmoe::f32_to_bf16 (NaN payloads, Inf, subnormals, ties,
//    overflow to Inf), at the documented tile position, and nothing else written.
//  - the layer: the registered "amx_bf16" backend against "reference" with many groups forced
//    onto the unfolded path (codes 30 / 63, and a lone 251 in a group's last row), the
//    foldable edges 64 / 250 present (tolerance: see kLayerTolerance); 1 and 2 threads must
//    give identical bits.
// The test binary has no AMX flags: only the plain functions of bf16_amx_kernels.hpp are called.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "backends/amx_bf16/bf16_amx_kernels.hpp"
#include "backends/common/group16_pack.hpp"
#include "backends/registry.hpp"
#include "hw/amx_permission.hpp"
#include "mxfp4_copy.hpp"
#include "mxmoe/format.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/layer_spec.hpp"
#include "mxmoe/oracle.hpp"
#include "mxmoe/weights.hpp"
#include "test_runtime.hpp"

namespace mxmoe {
namespace {

namespace amx = bf16_amx;

constexpr std::size_t kRows = group16::kRows;   // outputs per group
constexpr std::size_t kTile = amx::kBTileElems;  // bf16 elements per decoded (group, block)
constexpr std::uint16_t kUnwritten = 0xA5A5;     // sentinel bits (a normal bf16, never a result)

// "" when this machine and OS can run the kernels, else why not (every test skips then).
std::string amx_bf16_unavailable() {
  static const std::string why = [] {
    const Hardware hw = probe_hardware();
    if (!hw.isa.amx_bf16 || !hw.isa.avx512_bf16)
      return std::string("CPU or OS lacks AMX-BF16 / AVX512-BF16");
    const std::string refused = hw::request_amx_tile_permission();
    return refused.empty() ? std::string() : "AMX tile permission refused: " + refused;
  }();
  return why;
}

// ---- Packed groups ------------------------------------------------------------------------

// The foldable scale codes as bf16_amx_kernels.hpp documents them, 64 <= e <= 250 (checked
// against the header's bf16_scale_foldable in DecodeFoldedIsExact, so a drift of either shows).
constexpr bool foldable_code(std::uint8_t e) {
  return e >= 64 && e <= 250;
}

// One group: 16 output rows x 32 * blocks inputs of E2M1 codes, one E8M0 scale per (block, row).
struct Group {
  int blocks = 0;
  std::vector<std::uint8_t> codes;   // [n][k], k over all blocks
  std::vector<std::uint8_t> scales;  // [b][n]
  std::vector<std::uint8_t> packed;  // blocks x group16::kBlockBytes (pack())

  std::size_t nblocks() const { return static_cast<std::size_t>(blocks); }
  std::size_t cols() const { return 32 * nblocks(); }
  std::uint8_t& code(std::size_t n, std::size_t k) { return codes[n * cols() + k]; }
  std::uint8_t code(std::size_t n, std::size_t k) const { return codes[n * cols() + k]; }
  std::uint8_t& scale(std::size_t b, std::size_t n) { return scales[kRows * b + n]; }
  std::uint8_t scale(std::size_t b, std::size_t n) const { return scales[kRows * b + n]; }
  bool foldable() const { return std::all_of(scales.begin(), scales.end(), foldable_code); }
  // The exact weight (float64): e2m1_decode(code) x e8m0_decode(scale of its block).
  double weight(std::size_t n, std::size_t k) const {
    return static_cast<double>(e2m1_decode(code(n, k))) *
           static_cast<double>(e8m0_decode(scale(k / 32, n)));
  }
};

// Packs g.codes / g.scales as documented in bf16_amx_kernels.hpp (written from the header,
// independently of the driver's arrange_bf16): per block, nibble r (bits 4r..4r+3) of the
// little-endian 16-bit word j of 64-byte chunk q is element 8q + 2r + j%2 of output row j/2;
// then the 16 rows' scale bytes.
void pack(Group& g) {
  g.packed.assign(g.nblocks() * group16::kBlockBytes, 0);
  for (std::size_t b = 0; b < g.nblocks(); ++b) {
    std::uint8_t* dst = g.packed.data() + b * group16::kBlockBytes;
    for (std::size_t q = 0; q < 4; ++q)
      for (std::size_t j = 0; j < 32; ++j) {
        unsigned word = 0;
        for (std::size_t r = 0; r < 4; ++r)
          word |= static_cast<unsigned>(g.code(j / 2, 32 * b + 8 * q + 2 * r + j % 2)) << (4 * r);
        dst[64 * q + 2 * j] = static_cast<std::uint8_t>(word & 0xFFu);
        dst[64 * q + 2 * j + 1] = static_cast<std::uint8_t>(word >> 8);
      }
    for (std::size_t n = 0; n < kRows; ++n) dst[group16::kNibbleBytes + n] = g.scale(b, n);
  }
}

// Random codes (all 16, both zeros included), scales from scale_of(b, n); not packed yet.
template <class ScaleOf>
Group random_group(int blocks, std::mt19937_64& rng, ScaleOf scale_of) {
  Group g;
  g.blocks = blocks;
  g.codes.resize(kRows * g.cols());
  g.scales.resize(kRows * g.nblocks());
  std::uniform_int_distribution<int> code(0, 15);
  for (auto& c : g.codes) c = static_cast<std::uint8_t>(code(rng));
  for (std::size_t b = 0; b < g.nblocks(); ++b)
    for (std::size_t n = 0; n < kRows; ++n) g.scale(b, n) = scale_of(b, n);
  return g;
}

// Row n of block b gets scale e and every code 0..15 (twice, in a rotated order).
void every_code_at(Group& g, std::size_t b, std::size_t n, std::uint8_t e) {
  g.scale(b, n) = e;
  for (std::size_t i = 0; i < 32; ++i)
    g.code(n, 32 * b + i) = static_cast<std::uint8_t>((i * 7 + n) % 16);
}

// bf16 bits a decoded weight must have: the exact value through f32_to_bf16, except that a
// zero (code 0 or 8, i.e. +0 or -0) is +0.
std::uint16_t weight_bits(double v) {
  if (v == 0) return 0;
  return f32_to_bf16(static_cast<float>(v));
}

// Every element of the B tiles of g (decoded with `fold`): row kk, word w of block b's tile is
// element (n = w/2, k = 32 b + 2 kk + w%2), TDPBF16PS's [K/2][N][2] layout.
void expect_tiles(const Group& g, bool fold, const std::vector<std::uint16_t>& tiles) {
  int bad = 0;
  for (std::size_t b = 0; b < g.nblocks(); ++b)
    for (std::size_t kk = 0; kk < 16; ++kk)
      for (std::size_t w = 0; w < 32; ++w) {
        const std::size_t n = w / 2, k = 32 * b + 2 * kk + w % 2;
        const double value = fold ? g.weight(n, k) : static_cast<double>(e2m1_decode(g.code(n, k)));
        const std::uint16_t want = weight_bits(value);
        // The header's claim that makes the folded check exact: the value IS a bf16.
        if (static_cast<double>(bf16_to_f32(want)) != value && ++bad <= 10)
          ADD_FAILURE() << "value " << value << " (scale " << int{g.scale(b, n)}
                        << ") is not exact in bf16";
        const std::uint16_t got = tiles[b * kTile + 32 * kk + w];
        if (got != want && ++bad <= 10)
          ADD_FAILURE() << "block " << b << " tile row " << kk << " word " << w << " (output " << n
                        << ", k " << k << ", code " << int{g.code(n, k)} << ", scale "
                        << int{g.scale(b, n)} << "): got 0x" << std::hex << got << " want 0x"
                        << want << std::dec;
      }
  EXPECT_EQ(bad, 0) << "mismatching tile elements (first 10 shown)";
}

TEST(AmxBf16Kernels, DecodeFoldedIsExact) {
  if (const std::string why = amx_bf16_unavailable(); !why.empty()) GTEST_SKIP() << why;
  for (int e = 0; e < 256; ++e) {
    const auto code = static_cast<std::uint8_t>(e);
    EXPECT_EQ(amx::bf16_scale_foldable(code), foldable_code(code)) << "scale code " << e;
  }
  constexpr int kBlocks = 5;
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> foldable(64, 250);
  for (int round = 0; round < 8; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Group g = random_group(kBlocks, rng, [&](std::size_t, std::size_t) {
      return static_cast<std::uint8_t>(foldable(rng));
    });
    // The edges of the foldable range, each with every code, in several blocks and rows.
    every_code_at(g, 0, 0, 64);
    every_code_at(g, 0, 1, 250);
    every_code_at(g, 2, 7, 250);
    every_code_at(g, 4, 15, 64);
    every_code_at(g, 3, static_cast<std::size_t>(round), 64);
    every_code_at(g, 1, static_cast<std::size_t>(15 - round), 250);
    pack(g);
    ASSERT_TRUE(g.foldable());
    std::vector<std::uint16_t> tiles(kBlocks * kTile, 0xFFFF);  // NaN until written
    std::vector<float> block_scale(kBlocks * kRows, std::numeric_limits<float>::quiet_NaN());
    amx::bf16_amx_tiles_decode_group__amx_bf16(g.packed.data(), kBlocks, /*fold=*/true,
                                               tiles.data(), block_scale.data());
    expect_tiles(g, true, tiles);
  }
}

TEST(AmxBf16Kernels, DecodeUnfoldedKeepsScalesOutside) {
  if (const std::string why = amx_bf16_unavailable(); !why.empty()) GTEST_SKIP() << why;
  constexpr int kBlocks = 5;
  std::mt19937_64 rng(22);
  std::uniform_int_distribution<int> any_scale(0, 254);  // 255 is NaN, rejected by validate()
  for (int round = 0; round < 8; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Group g = random_group(kBlocks, rng, [&](std::size_t, std::size_t) {
      return static_cast<std::uint8_t>(any_scale(rng));
    });
    // Subnormal 2^-127 (0), 2^-126 (1), both sides of the foldable range, the largest code.
    every_code_at(g, 0, 0, 0);
    every_code_at(g, 0, 1, 1);
    every_code_at(g, 1, 2, 63);
    every_code_at(g, 2, 3, 251);
    every_code_at(g, 4, 15, 254);
    every_code_at(g, 3, static_cast<std::size_t>(round), 0);
    pack(g);
    ASSERT_FALSE(g.foldable());
    std::vector<std::uint16_t> tiles(kBlocks * kTile, 0xFFFF);
    std::vector<float> block_scale(kBlocks * kRows, std::numeric_limits<float>::quiet_NaN());
    amx::bf16_amx_tiles_decode_group__amx_bf16(g.packed.data(), kBlocks, /*fold=*/false,
                                               tiles.data(), block_scale.data());
    expect_tiles(g, false, tiles);
    for (std::size_t b = 0; b < g.nblocks(); ++b)
      for (std::size_t n = 0; n < kRows; ++n) {
        const int e = g.scale(b, n);
        const float want = std::ldexp(1.0f, e - 127);  // exact, subnormal for e = 0
        const float got = block_scale[kRows * b + n];
        EXPECT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want))
            << "block " << b << " row " << n << " e " << e << ": got " << got;
        EXPECT_EQ(std::bit_cast<std::uint32_t>(want),
                  std::bit_cast<std::uint32_t>(e8m0_decode(static_cast<std::uint8_t>(e))));
      }
  }
}

// ---- gemm_32x32 ---------------------------------------------------------------------------

// Token activations as bf16 bits, [t][k].
struct Activations {
  std::size_t tokens = 0, cols = 0;
  std::vector<std::uint16_t> bits;
  double value(std::size_t t, std::size_t k) const {
    return static_cast<double>(bf16_to_f32(bits[t * cols + k]));
  }
};

// N(0, 1) x 2^-16, rounded to bf16: products with the largest weights (6 x 2^127) and their
// sums stay far from fp32 overflow, and products with the smallest folded weights (2^-64)
// stay normal (TDPBF16PS treats denormal inputs as zero and flushes denormal results).
Activations random_activations(std::size_t tokens, std::size_t cols, std::mt19937_64& rng) {
  Activations x{tokens, cols, std::vector<std::uint16_t>(tokens * cols)};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& b : x.bits) b = f32_to_bf16(std::ldexp(normal(rng), -16));
  return x;
}

std::uint8_t clamp_code(int e, int lo, int hi) {
  return static_cast<std::uint8_t>(std::clamp(e, lo, hi));
}

// Each row its own magnitude: a base code per row (given ones first, then random in
// [lo, hi]), blocks within 3 codes of it (clamped to [lo, hi]), so that every block matters
// in every row's dot product (and the rows at the edges reach lo / hi).
Group regime_group(int blocks, int lo, int hi, std::vector<int> bases, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> base(lo, hi), jitter(-3, 3);
  while (bases.size() < kRows) bases.push_back(base(rng));
  Group g = random_group(blocks, rng, [&](std::size_t, std::size_t n) {
    return clamp_code(bases[n] + jitter(rng), lo, hi);
  });
  pack(g);
  return g;
}
Group folded_group(int blocks, std::mt19937_64& rng) {
  return regime_group(blocks, 64, 250, {64, 250, 64, 250}, rng);
}
// Unfoldable: subnormal scales (row 0), the largest codes (1), just below / above the range.
Group unfolded_group(int blocks, std::mt19937_64& rng) {
  return regime_group(blocks, 0, 254, {0, 254, 63, 251, 30}, rng);
}

// How run_pair hands gemm_32x32 the B tiles (GroupPair): decoded before by decode_group, or
// the packed groups (both must be foldable) decoded inside the K loop into whole-group
// buffers (which later steps re-read) or into rings of kDecodeRing tiles (5 blocks wrap).
enum class Decode { before, whole, ring };
const char* to_string(Decode d) {
  return d == Decode::before  ? "decoded before"
         : d == Decode::whole ? "decoded in the K loop"
                              : "decoded into rings";
}

constexpr Decode kDecodes[] = {Decode::before, Decode::whole, Decode::ring};

struct PairRun {
  std::vector<float> out;               // out[32][32]; rows past `rows` as gemm_32x32 left them
  std::vector<std::uint16_t> tiles[2];  // the B tile buffers after the call
};

// Runs gemm_32x32 on the given tokens (1..32, in tile-row order; the tiles' other rows are
// zero). Tile buffers not decoded before start as NaN bits, so a block not decoded, or
// overwritten too early, shows; a ring is followed by a guard tile that must stay untouched.
// unit_scales: decode both groups unfolded and replace their block scales by 1, so that
// out = fma(C, 1, +0) = the raw TDPBF16PS product C (one-block groups; see unfolded_order).
// config_rows: the tiles' configured rows; 0 = the driver's rule (the token count, at most 16).
PairRun run_pair(const Group& g0, const Group& g1, Decode decode, const Activations& x,
                 const std::vector<std::size_t>& tokens, bool unit_scales = false,
                 int config_rows = 0) {
  const std::size_t nb = g0.nblocks();
  const std::size_t stride = nb * amx::kATileElems;
  std::vector<std::uint16_t> a(2 * stride, 0);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    for (std::size_t b = 0; b < nb; ++b)
      for (std::size_t c = 0; c < 32; ++c)
        a[(i / 16) * stride + b * amx::kATileElems + (i % 16) * 32 + c] =
            x.bits[tokens[i] * x.cols + 32 * b + c];
  const Group* groups[2] = {&g0, &g1};
  const std::size_t ring_tiles = static_cast<std::size_t>(amx::kDecodeRing);
  PairRun run;
  std::vector<float> scales[2];
  amx::GroupPair pair;
  for (std::size_t i = 0; i < 2; ++i) {
    const Group& g = *groups[i];
    run.tiles[i].assign(decode == Decode::ring ? (ring_tiles + 1) * kTile : nb * kTile, 0xFFFF);
    if (decode == Decode::ring)
      std::fill(run.tiles[i].begin() + static_cast<std::ptrdiff_t>(ring_tiles * kTile),
                run.tiles[i].end(), kUnwritten);
    scales[i].assign(nb * kRows, std::numeric_limits<float>::quiet_NaN());
    pair.fold[i] = !unit_scales && g.foldable();
    if (decode == Decode::before) {
      amx::bf16_amx_tiles_decode_group__amx_bf16(g.packed.data(), g.blocks, pair.fold[i],
                                                 run.tiles[i].data(), scales[i].data());
    } else {
      pair.packed[i] = g.packed.data();
      pair.ring = decode == Decode::ring;
    }
    if (unit_scales) std::fill(scales[i].begin(), scales[i].end(), 1.0f);
    pair.tiles[i] = run.tiles[i].data();
    pair.block_scale[i] = scales[i].data();
  }
  alignas(64) std::array<float, 256> c_scratch{};
  run.out.assign(32 * 32, std::numeric_limits<float>::quiet_NaN());
  const int n = static_cast<int>(tokens.size());
  amx::bf16_amx_tiles_tile_config__amx_bf16(config_rows > 0 ? config_rows : (n < 16 ? n : 16));
  amx::bf16_amx_tiles_gemm_32x32__amx_bf16(
      pair, g0.blocks, a.data(), static_cast<std::int64_t>(stride), static_cast<int>(tokens.size()),
      run.out.data(), 32, c_scratch.data());
  amx::bf16_amx_tiles_tile_release__amx_bf16();
  for (std::size_t i = 0; decode == Decode::ring && i < 2; ++i) {
    const auto guard = run.tiles[i].begin() + static_cast<std::ptrdiff_t>(ring_tiles * kTile);
    EXPECT_TRUE(
        std::all_of(guard, run.tiles[i].end(), [](std::uint16_t v) { return v == kUnwritten; }))
        << "group " << i << ": a ring of " << ring_tiles << " tiles was written past its end";
  }
  return run;
}

// Bound on |fp32 result - float64 dot| for K = 32 * blocks terms of magnitude sum S.
// The products of bf16 activations and weights (8-bit significands) are exact in fp32; the
// K/2 TDPBF16PS steps round at most twice each (K roundings of at most 2^-24 relative to a
// partial sum <= S), an unfolded group adds one fma rounding per block (the scaling by
// 2^(e-127) is exact while normal). Below 2^-126 (subnormal scales) each block's fma rounds
// to within 2^-150 absolute. Hence (K + blocks) 2^-24 S + blocks 2^-149 (taken as K 2^-149).
// One wrong weight changes the dot by about S / K: ~600 times the bound at K = 160.
double gemm_bound(double magnitude, std::size_t cols, std::size_t blocks) {
  return static_cast<double>(cols + blocks) * std::ldexp(1.0, -24) * magnitude +
         static_cast<double>(cols) * std::ldexp(1.0, -149);
}

std::vector<std::size_t> first_tokens(std::size_t count) {
  std::vector<std::size_t> t(count);
  for (std::size_t i = 0; i < count; ++i) t[i] = i;
  return t;
}

// The documented arithmetic of an unfolded group, emulated: C_b = block b's product alone
// (gemm_32x32 on one-block slices of g and x, unit scales), then in fp32 and block order
// acc = fma(C_b, 2^(e-127), acc) from +0. Returns acc[t][n] for the 32 tokens of x.
std::vector<float> unfolded_order(const Group& g, const Activations& x) {
  std::vector<float> acc(32 * kRows, 0.0f);
  for (std::size_t b = 0; b < g.nblocks(); ++b) {
    Group slice;
    slice.blocks = 1;
    for (std::size_t n = 0; n < kRows; ++n) {
      for (std::size_t k = 0; k < 32; ++k) slice.codes.push_back(g.code(n, 32 * b + k));
      slice.scales.push_back(g.scale(b, n));
    }
    pack(slice);
    Activations xs{x.tokens, 32, {}};
    for (std::size_t t = 0; t < x.tokens; ++t)
      for (std::size_t k = 0; k < 32; ++k) xs.bits.push_back(x.bits[t * x.cols + 32 * b + k]);
    const std::vector<float> c =
        run_pair(slice, slice, Decode::before, xs, first_tokens(32), true).out;
    for (std::size_t t = 0; t < 32; ++t)
      for (std::size_t n = 0; n < kRows; ++n)
        acc[t * kRows + n] =
            std::fma(c[t * 32 + n], std::ldexp(1.0f, int{g.scale(b, n)} - 127), acc[t * kRows + n]);
  }
  return acc;
}

bool same_bits(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

TEST(AmxBf16Kernels, GemmPairMatchesFloat64) {
  if (const std::string why = amx_bf16_unavailable(); !why.empty()) GTEST_SKIP() << why;
  constexpr int kBlocks = 5;
  constexpr std::size_t kTokens = 32, kCols = 32 * kBlocks;
  std::mt19937_64 rng(33);
  const Activations x = random_activations(kTokens, kCols, rng);
  struct Case {
    const char* name;
    Group g0, g1;
  };
  std::vector<Case> cases;
  cases.push_back({"folded+folded", folded_group(kBlocks, rng), folded_group(kBlocks, rng)});
  cases.push_back({"folded+unfolded", folded_group(kBlocks, rng), unfolded_group(kBlocks, rng)});
  cases.push_back({"unfolded+folded", unfolded_group(kBlocks, rng), folded_group(kBlocks, rng)});
  cases.push_back(
      {"unfolded+unfolded", unfolded_group(kBlocks, rng), unfolded_group(kBlocks, rng)});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(std::string_view(c.name).find("unfolded") == std::string_view::npos,
              c.g0.foldable() && c.g1.foldable());
    const bool both_folded = c.g0.foldable() && c.g1.foldable();

    // float64 dot products and their magnitudes, out column j = 16 * group + row.
    std::vector<double> exact(kTokens * 32), magnitude(kTokens * 32);
    for (std::size_t t = 0; t < kTokens; ++t)
      for (std::size_t j = 0; j < 32; ++j) {
        const Group& g = j < 16 ? c.g0 : c.g1;
        double sum = 0, abs_sum = 0;
        for (std::size_t k = 0; k < kCols; ++k) {
          const double term = x.value(t, k) * g.weight(j % 16, k);
          sum += term;
          abs_sum += std::fabs(term);
        }
        exact[t * 32 + j] = sum;
        magnitude[t * 32 + j] = abs_sum;
      }

    // All 32 tokens in two tiles: the bits every other run must reproduce.
    const PairRun reference = run_pair(c.g0, c.g1, Decode::before, x, first_tokens(kTokens));
    const std::vector<float>& full = reference.out;
    for (const std::size_t rows : {1u, 5u, 16u, 17u, 32u}) {
      for (const Decode decode : kDecodes) {
        if (decode != Decode::before && !both_folded) continue;  // foldable pairs only
        SCOPED_TRACE("rows " + std::to_string(rows) + ", " + to_string(decode));
        const PairRun run = run_pair(c.g0, c.g1, decode, x, first_tokens(rows));
        const std::vector<float>& out = run.out;
        // Whole-group buffers decoded in the loop hold decode_group's tiles, for later steps.
        for (std::size_t i = 0; decode == Decode::whole && i < 2; ++i) {
          EXPECT_TRUE(run.tiles[i] == reference.tiles[i])
              << "group " << i << ": the tiles decoded in the K loop differ from decode_group's";
        }
        int bad = 0;
        for (std::size_t t = 0; t < rows; ++t)
          for (std::size_t j = 0; j < 32; ++j) {
            const float got = out[t * 32 + j];
            const double want = exact[t * 32 + j];
            const double bound = gemm_bound(magnitude[t * 32 + j], kCols, kBlocks);
            if (!(std::fabs(static_cast<double>(got) - want) <= bound) && ++bad <= 10)
              ADD_FAILURE() << "token " << t << " output " << j << ": got " << got << " want "
                            << want << " (bound " << bound << ")";
            if (!same_bits(got, full[t * 32 + j]) && ++bad <= 10)
              ADD_FAILURE() << "token " << t << " output " << j << ": " << got
                            << " differs from the 32-row run's " << full[t * 32 + j];
          }
        EXPECT_EQ(bad, 0) << "(first 10 shown)";
      }
    }

    // An unfolded group's bits are exactly the documented fma chain over its blocks.
    for (std::size_t gi = 0; gi < 2; ++gi) {
      const Group& g = gi == 0 ? c.g0 : c.g1;
      if (g.foldable()) continue;
      const std::vector<float> chain = unfolded_order(g, x);
      int bad = 0;
      for (std::size_t t = 0; t < kTokens; ++t)
        for (std::size_t n = 0; n < kRows; ++n) {
          const float got = full[t * 32 + 16 * gi + n], want = chain[t * kRows + n];
          if (!same_bits(got, want) && ++bad <= 10)
            ADD_FAILURE() << "group " << gi << " token " << t << " output " << n << ": got " << got
                          << ", the fma chain over the blocks gives " << want;
        }
      EXPECT_EQ(bad, 0) << "(first 10 shown)";
    }

    // Batch invariance: alone in its tile (rows = 1, at tile row 0; tiles configured with
    // 1 row as the driver does, and with 16), every token gets the bits it had among 31
    // others.
    for (const Decode decode : kDecodes) {
      if (decode != Decode::before && !both_folded) continue;
      for (const int config_rows : {1, 16}) {
        int bad = 0;
        for (std::size_t t = 0; t < kTokens; ++t) {
          const std::vector<float> alone =
              run_pair(c.g0, c.g1, decode, x, {t}, false, config_rows).out;
          for (std::size_t j = 0; j < 32; ++j)
            if (!same_bits(alone[j], full[t * 32 + j]) && ++bad <= 10)
              ADD_FAILURE() << "token " << t << " output " << j << " (" << to_string(decode) << ", "
                            << config_rows << "-row tiles): alone " << alone[j]
                            << ", among 31 others " << full[t * 32 + j];
        }
        EXPECT_EQ(bad, 0) << "(first 10 shown)";
      }
    }
  }
}

// ---- round_rows ---------------------------------------------------------------------------

TEST(AmxBf16Kernels, RoundRowToTilesMatchesScalar) {
  if (const std::string why = amx_bf16_unavailable(); !why.empty()) GTEST_SKIP() << why;
  constexpr int kBlocks = 3;
  constexpr std::size_t kCols = 32 * kBlocks;
  // float bits and the bf16 bits mxmoe::f32_to_bf16 documents for them.
  struct Special {
    std::uint32_t in;
    std::uint16_t out;
  };
  constexpr Special kSpecials[] = {
      {0x7FC00000u, 0x7FC0u},  // quiet NaN
      {0xFFC00001u, 0xFFC0u},  // negative quiet NaN, payload in the dropped bits
      {0x7F800001u, 0x7FC0u},  // signaling NaN, payload only in the dropped bits: not Inf
      {0x7FBFFFFFu, 0x7FFFu},  // signaling NaN, high payload kept, quieted
      {0xFF812345u, 0xFFC1u},  // negative signaling NaN
      {0x7FA50000u, 0x7FE5u},  // payload exactly in the kept bits
      {0x7F800000u, 0x7F80u},  // +Inf
      {0xFF800000u, 0xFF80u},  // -Inf
      {0x00000000u, 0x0000u},  // +0
      {0x80000000u, 0x8000u},  // -0
      {0x00000001u, 0x0000u},  // smallest subnormal rounds to +0
      {0x80000001u, 0x8000u},  // ... and to -0
      {0x00008000u, 0x0000u},  // subnormal tie, even: down
      {0x00018000u, 0x0002u},  // subnormal tie, odd: up
      {0x00017FFFu, 0x0001u},  // just below a tie
      {0x00008001u, 0x0001u},  // just above a tie
      {0x007FFFFFu, 0x0080u},  // largest subnormal rounds up to the smallest normal
      {0x807FFFFFu, 0x8080u},  // ... and its negative
      {0x3F800000u, 0x3F80u},  // 1.0
      {0x3F808000u, 0x3F80u},  // tie, even: down
      {0x3F818000u, 0x3F82u},  // tie, odd: up
      {0x3F807FFFu, 0x3F80u},  // just below a tie
      {0x3F808001u, 0x3F81u},  // just above a tie
      {0xBF818000u, 0xBF82u},  // negative tie, odd: away from zero
      {0x7F7FFFFFu, 0x7F80u},  // FLT_MAX rounds to +Inf
      {0xFF7FFFFFu, 0xFF80u},  // -FLT_MAX to -Inf
      {0x7F7F8000u, 0x7F80u},  // tie at the top, odd: +Inf
      {0x7F7F7FFFu, 0x7F7Fu},  // just below it: largest finite bf16
      {0x7F7E8000u, 0x7F7Eu},  // tie at the top, even: stays finite
  };
  constexpr std::size_t kSpecialCount = sizeof(kSpecials) / sizeof(kSpecials[0]);
  for (const Special& s : kSpecials)
    ASSERT_EQ(f32_to_bf16(std::bit_cast<float>(s.in)), s.out) << std::hex << s.in;

  std::mt19937_64 rng(44);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  for (const std::size_t row : {0u, 7u, 15u}) {
    for (std::size_t shift = 0; shift < kCols; shift += 37) {  // specials in every block
      SCOPED_TRACE("tile row " + std::to_string(row) + ", specials at " + std::to_string(shift));
      // The specials at shift.., then random bit patterns (any class) and ordinary floats.
      std::vector<std::uint32_t> bits(kCols);
      for (std::size_t i = 0; i < kCols; ++i) {
        const std::size_t s = (i + kCols - shift) % kCols;
        if (s < kSpecialCount)
          bits[i] = kSpecials[s].in;
        else if (i % 2 == 0)
          bits[i] = static_cast<std::uint32_t>(rng());
        else
          bits[i] = std::bit_cast<std::uint32_t>(normal(rng));
      }
      std::vector<float> x(kCols);
      std::memcpy(x.data(), bits.data(), kCols * sizeof(float));  // NaN payloads untouched
      std::vector<std::uint16_t> tiles(kBlocks * amx::kATileElems, kUnwritten);
      amx::bf16_amx_tiles_round_rows__amx_bf16(x.data(), kBlocks, tiles.data() + 32 * row);
      int bad = 0;
      for (std::size_t at = 0; at < tiles.size(); ++at) {
        const std::size_t b = at / amx::kATileElems, r = at % amx::kATileElems / 32, c = at % 32;
        // Element 32 b + c belongs at row[b * kATileElems + c]; everything else is untouched.
        const std::uint16_t want =
            r == row ? f32_to_bf16(std::bit_cast<float>(bits[32 * b + c])) : kUnwritten;
        if (tiles[at] != want && ++bad <= 10)
          ADD_FAILURE() << "tile " << b << " row " << r << " column " << c << ": got 0x" << std::hex
                        << tiles[at] << " want 0x" << want << std::dec
                        << (r == row ? "" : " (must stay untouched)");
      }
      EXPECT_EQ(bad, 0) << "(first 10 shown)";
    }
  }
}

// ---- The layer ----------------------------------------------------------------------------

// 1e-5 relative L2, the project's contract against the reference (tests/conformance): the
// backend's fp32 accumulation over K <= 160 is a few 1e-7 relative, plus rare one-ulp
// differences where an intermediate sits on a bf16 rounding boundary; a wrong block, scale,
// lane or path gives errors of order 1e-2 or more.
constexpr double kLayerTolerance = 1e-5;

// Mutable copy of one projection's MXFP4 bytes (the LayerStorage's are read-only).
struct Projection {
  std::int64_t experts, rows, cols;
  std::vector<std::uint8_t> blocks, scales;
  explicit Projection(const Mxfp4View& v) : Projection(testing::Mxfp4Copy(v)) {}
  explicit Projection(testing::Mxfp4Copy c)
      : experts(c.experts),
        rows(c.rows),
        cols(c.cols),
        blocks(std::move(c.blocks)),
        scales(std::move(c.scales)) {}
  Mxfp4View view() const {
    return Mxfp4View::contiguous(blocks.data(), scales.data(), experts, rows, cols);
  }
  std::int64_t nblocks() const { return cols / 32; }
  std::size_t block_index(std::int64_t e, std::int64_t row, std::int64_t b) const {
    return static_cast<std::size_t>((e * rows + row) * nblocks() + b);
  }
  std::uint8_t& scale(std::int64_t e, std::int64_t row, std::int64_t b) {
    return scales[block_index(e, row, b)];
  }
  // That block's codes: all +0 but element `at` (gpt-oss nibble order: element 2j in the low
  // nibble of byte j, 2j+1 in the high one).
  void single_code(std::int64_t e, std::int64_t row, std::int64_t b, std::size_t at,
                   std::uint8_t code) {
    std::uint8_t* p = blocks.data() + 16 * block_index(e, row, b);
    std::memset(p, 0, 16);
    p[at / 2] = static_cast<std::uint8_t>(code << (4 * (at % 2)));
  }
};

// Source row of row i of group g (group16_pack.hpp): W1 per 16 units jt holds [gate | up]
// groups, gpt-oss interleaves gate j (row 2j) and up j (row 2j + 1); W2 groups are 16 rows.
std::int64_t w1_row(std::int64_t g, std::int64_t i) {
  return 2 * (16 * (g / 2) + i) + g % 2;
}
std::int64_t w2_row(std::int64_t g, std::int64_t i) {
  return 16 * g + i;
}

// Scale edits of one projection, by packed group: ~40% of the groups get ~10% of their
// scales (at least one) set to the unfoldable codes 30 or 63 (so pairs are folded, mixed and
// unfolded alike; 10% of ALL scales would leave almost no group foldable), then some
// foldable groups get a few 64s. Returns the unfolded flag of each (expert, group).
template <class RowOf>
std::vector<char> edit_scales(Projection& p, std::int64_t groups, RowOf row_of,
                              std::mt19937_64& rng) {
  std::vector<char> unfolded(static_cast<std::size_t>(p.experts * groups), 0);
  const std::int64_t per_group = std::max<std::int64_t>(1, 16 * p.nblocks() / 10);
  for (std::int64_t e = 0; e < p.experts; ++e)
    for (std::int64_t g = 0; g < groups; ++g) {
      if (rng() % 5 >= 2) continue;
      unfolded[static_cast<std::size_t>(e * groups + g)] = 1;
      for (std::int64_t edit = 0; edit < per_group; ++edit) {
        const auto i = static_cast<std::int64_t>(rng() % 16);
        const auto b = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(p.nblocks()));
        p.scale(e, row_of(g, i), b) = static_cast<std::uint8_t>(rng() % 2 == 0 ? 30 : 63);
      }
    }
  for (std::int64_t e = 0; e < p.experts; ++e)
    for (std::int64_t g = 0; g < groups; g += 3)
      if (unfolded[static_cast<std::size_t>(e * groups + g)] == 0)
        for (int edit = 0; edit < 3; ++edit)
          p.scale(e, row_of(g, static_cast<std::int64_t>(rng() % 16)),
                  static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(p.nblocks()))) = 64;
  return unfolded;
}

// One block at scale code e8m0 (250 or 251: a weight of 2^122 or 2^123, the dot products
// stay finite) in the first foldable group of expert e, at row i of the group (random when
// i < 0), with codes all +0 but one +-0.5. Returns the source row.
template <class RowOf>
std::int64_t put_huge(Projection& p, std::vector<char>& unfolded, std::int64_t groups, RowOf row_of,
                      std::int64_t e, std::uint8_t e8m0, std::int64_t i, std::mt19937_64& rng) {
  for (std::int64_t g = 0; g < groups; ++g) {
    const auto group = static_cast<std::size_t>(e * groups + g);
    if (unfolded[group] != 0) continue;
    const std::int64_t row = row_of(g, i >= 0 ? i : static_cast<std::int64_t>(rng() % 16));
    const auto b = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(p.nblocks()));
    p.scale(e, row, b) = e8m0;
    p.single_code(e, row, b, rng() % 32, static_cast<std::uint8_t>(rng() % 2 == 0 ? 0x1 : 0x9));
    if (!foldable_code(e8m0)) unfolded[group] = 1;
    return row;
  }
  ADD_FAILURE() << "no foldable group in expert " << e;
  return 0;
}

// Pairs of packed groups (the real packing), by how many of the two are foldable; and the
// foldable groups that hold a 250.
struct PairCounts {
  int folded = 0, mixed = 0, unfolded = 0, foldable_with_250 = 0;
};
PairCounts count_pairs(const std::vector<std::uint8_t>& packed, std::size_t group_bytes) {
  PairCounts c;
  std::vector<bool> fold;
  for (std::size_t at = 0; at < packed.size(); at += group_bytes) {
    bool foldable = true, has_250 = false;
    for (std::size_t s = group16::kNibbleBytes; s < group_bytes; s += group16::kBlockBytes)
      for (std::size_t i = 0; i < kRows; ++i) {
        foldable = foldable && foldable_code(packed[at + s + i]);
        has_250 = has_250 || packed[at + s + i] == 250;
      }
    fold.push_back(foldable);
    if (foldable && has_250) ++c.foldable_with_250;
  }
  for (std::size_t g = 0; g + 1 < fold.size(); g += 2) {
    const int n = (fold[g] ? 1 : 0) + (fold[g + 1] ? 1 : 0);
    (n == 2 ? c.folded : n == 1 ? c.mixed : c.unfolded) += 1;
  }
  return c;
}

void ignore_nibbles(const std::uint8_t (&)[group16::kRows][32], std::uint8_t*) {}

Selection forced_selection(std::string_view backend, const LayerSpec& spec, int threads) {
  Selection sel;
  sel.deployment.layer = spec;
  sel.deployment.hardware = probe_hardware();
  sel.deployment.request.activation = ActivationFormat::bf16;
  sel.deployment.request.threads = threads;
  sel.chosen = std::string(backend);
  sel.why = "amx_bf16 test";
  return sel;
}

// ||got - want|| / ||want|| over the elements i where take[i] == keep.
double relative_l2(const std::vector<float>& got, const std::vector<float>& want,
                   const std::vector<bool>& take, bool keep) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (take[i] != keep) continue;
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    num += d * d;
    den += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  return std::sqrt(num / den);
}

TEST(AmxBf16Layer, ExtremeScalesMatchReference) {
  if (const std::string why = amx_bf16_unavailable(); !why.empty()) GTEST_SKIP() << why;
  // gpt-oss math at a small shape (as tests/invariance small_spec): H = 96 and I = 160 are
  // multiples of 32 but not of 64, 3 and 5 K blocks.
  LayerSpec spec = preset("gpt-oss-20b");
  spec.name = "gpt-oss (amx_bf16 extreme scales)";
  spec.num_experts = 4;
  spec.top_k = 2;
  spec.hidden = 96;
  spec.intermediate = 160;
  ASSERT_EQ(spec.gate_up_layout, GateUpLayout::interleaved);  // w1_row's mapping
  const LayerStorage storage = LayerStorage::random(spec, 71);
  LayerWeights w = storage.weights();
  Projection w1(w.w1), w2(w.w2);
  const std::int64_t w1_groups = 2 * spec.intermediate / 16, w2_groups = spec.hidden / 16;

  std::mt19937_64 rng(72);
  auto unfolded1 = edit_scales(w1, w1_groups, w1_row, rng);
  auto unfolded2 = edit_scales(w2, w2_groups, w2_row, rng);
  // 2^122 weights (250, folded): in W1 (experts 0 and 1) the GLU clamps the huge gate / up
  // values; in W2 (expert 2, whose GLU outputs stay O(1)) the output column becomes huge, so
  // it is compared on its own below.
  put_huge(w1, unfolded1, w1_groups, w1_row, 0, 250, -1, rng);
  put_huge(w1, unfolded1, w1_groups, w1_row, 1, 250, -1, rng);
  const auto huge_column =
      static_cast<std::size_t>(put_huge(w2, unfolded2, w2_groups, w2_row, 2, 250, -1, rng));
  // A 2^123 weight (251, unfoldable) alone in the LAST row of an otherwise foldable W1 group
  // of expert 3: the group must take the unfolded path (folding 251 would zero the block,
  // and the GLU input would no longer be huge).
  put_huge(w1, unfolded1, w1_groups, w1_row, 3, 251, 15, rng);
  w.w1 = w1.view();
  w.w2 = w2.view();

  // The edits reach every path: counted on the real group16 packing.
  const group16::PackedExperts packed =
      group16::pack_experts(spec, w, &ignore_nibbles, "amx_bf16 test");
  const PairCounts c1 = count_pairs(packed.w1, packed.w1_group_bytes());
  const PairCounts c2 = count_pairs(packed.w2, packed.w2_group_bytes());
  for (const PairCounts& c : {c1, c2}) {
    EXPECT_GT(c.folded, 0);
    EXPECT_GT(c.mixed, 0);
    EXPECT_GT(c.unfolded, 0);
  }
  EXPECT_EQ(c1.foldable_with_250, 2);
  EXPECT_EQ(c2.foldable_with_250, 1);

  // 40 tokens: expert 0 gets all (a 2x2 step of 32, then a 1x2 step of 8), expert 1 gets 25
  // (2x2 with a partial second tile), experts 2 and 3 get 10 and 5 (1x2, partial tiles).
  constexpr std::int64_t kTokens = 40;
  std::vector<std::int32_t> ids;
  std::vector<float> route;
  std::uniform_real_distribution<float> route_weight(0.25f, 1.25f);
  for (std::int64_t t = 0; t < kTokens; ++t) {
    ids.push_back(0);
    ids.push_back(t % 8 < 5 ? 1 : t % 8 < 7 ? 2 : 3);
    route.push_back(route_weight(rng));
    route.push_back(route_weight(rng));
  }
  // Unit-variance inputs, one in 64 elements 30x larger.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(kTokens * spec.hidden));
  for (auto& v : x) v = normal(rng) * (rng() % 64 == 0 ? 30.0f : 1.0f);

  std::vector<float> want(x.size());
  mxmoe::testing::test_layer(w, forced_selection("reference", spec, 1))
      .forward({.tokens = kTokens,
                .x = x.data(),
                .y = want.data(),
                .expert_ids = ids.data(),
                .expert_weights = route.data()});

  const Selection sel = forced_selection("amx_bf16", spec, 1);
  const Backend* backend = find_backend("amx_bf16");
  ASSERT_NE(backend, nullptr);
  ASSERT_TRUE(backend->check(sel.deployment).empty()) << "amx_bf16 rejects this machine";
  MoeLayer layer = mxmoe::testing::test_layer(w, sel);
  std::vector<float> one(x.size()), two(x.size());
  layer.forward({.tokens = kTokens,
                 .x = x.data(),
                 .y = one.data(),
                 .expert_ids = ids.data(),
                 .expert_weights = route.data()});
  layer.set_runtime(mxmoe::testing::test_runtime(2));
  layer.forward({.tokens = kTokens,
                 .x = x.data(),
                 .y = two.data(),
                 .expert_ids = ids.data(),
                 .expert_weights = route.data()});
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0)
      << "1 and 2 threads differ";
  for (const float v : one) ASSERT_TRUE(std::isfinite(v));

  // The outputs of expert 2's tokens in huge_column (~2^122, one dominant term 2^122 a_k with
  // a_k the bf16 GLU output of both sides) are compared apart, not to swamp the others.
  const auto columns = static_cast<std::size_t>(spec.hidden);
  std::vector<bool> huge(one.size(), false);
  double smallest_huge = std::numeric_limits<double>::infinity();
  for (std::size_t t = 0; t < static_cast<std::size_t>(kTokens); ++t) {
    if (ids[2 * t + 1] != 2) continue;
    huge[t * columns + huge_column] = true;
    smallest_huge =
        std::min(smallest_huge, std::fabs(static_cast<double>(want[t * columns + huge_column])));
  }
  EXPECT_GT(smallest_huge, 1e20) << "the 250 block of W2 was lost";  // others are O(10)
  EXPECT_LT(relative_l2(one, want, huge, false), kLayerTolerance) << "all but the huge outputs";
  EXPECT_LT(relative_l2(one, want, huge, true), kLayerTolerance)
      << "expert 2's tokens in column " << huge_column << " (a 2^122 weight in W2)";
}

}  // namespace
}  // namespace mxmoe
