#include "perf/isa_loops.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#include <arm_sve.h>
#endif

#include <array>
#include <cstring>

namespace mxmoe::perf::loops {

std::uint64_t read_scalar(const std::byte* data, std::size_t bytes) {
  std::array<std::uint64_t, 8> acc{};
  for (std::size_t off = 0; off < bytes; off += 64) {
    for (std::size_t j = 0; j < 8; ++j) {
      std::uint64_t v;
      std::memcpy(&v, data + off + 8 * j, sizeof v);
      acc[j] += v;
    }
  }
  std::uint64_t total = 0;
  for (std::uint64_t a : acc) total += a;
  return total;
}

#if defined(__x86_64__)

namespace {

// Inputs the compiler cannot see through, so no loop is folded at compile time.
volatile float g_multiplier = 0.999999f;
volatile float g_addend = 1e-7f;
volatile std::int32_t g_int8_pattern = 0x01020304;

// Each vector type's start of the chains (kChains accumulators, distinct so that no two
// chains fold together) and checksum of them (their sum, so that no chain is dead).
__attribute__((target("avx512f"))) void init_chains(__m512 (&acc)[kChains]) {
  for (std::size_t c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
}
__attribute__((target("avx512f"))) void init_chains(__m512i (&acc)[kChains]) {
  for (std::size_t c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(static_cast<int>(c));
}
__attribute__((target("avx2"))) void init_chains(__m256 (&acc)[kChains]) {
  for (std::size_t c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
}
__attribute__((target("avx2"))) void init_chains(__m256i (&acc)[kChains]) {
  for (std::size_t c = 0; c < kChains; ++c) acc[c] = _mm256_set1_epi32(static_cast<int>(c));
}

// The vector adds of the checksums below, by vector and lane type (a __m512i or __m256i adds
// as int32 lanes in the chains and as 64-bit lanes in the reads).
__attribute__((target("avx512f"))) void add_lanes(__m512& t, const __m512& v, float) {
  t = _mm512_add_ps(t, v);
}
__attribute__((target("avx512f"))) void add_lanes(__m512i& t, const __m512i& v, std::int32_t) {
  t = _mm512_add_epi32(t, v);
}
__attribute__((target("avx512f"))) void add_lanes(__m512i& t, const __m512i& v, std::uint64_t) {
  t = _mm512_add_epi64(t, v);
}
__attribute__((target("avx2"))) void add_lanes(__m256& t, const __m256& v, float) {
  t = _mm256_add_ps(t, v);
}
__attribute__((target("avx2"))) void add_lanes(__m256i& t, const __m256i& v, std::int32_t) {
  t = _mm256_add_epi32(t, v);
}
__attribute__((target("avx2"))) void add_lanes(__m256i& t, const __m256i& v, std::uint64_t) {
  t = _mm256_add_epi64(t, v);
}

// The checksum of N accumulators of Lane lanes: their vector sum, whose lanes are then summed
// as Sum in lane order. (_mm512_reduce_add_* trips GCC 12's -Wuninitialized inside its own
// header.)
template <class Lane, class Sum, class V, std::size_t N>
Sum sum_lanes(const V (&acc)[N]) {
  V total = acc[0];
  for (std::size_t i = 1; i < N; ++i) add_lanes(total, acc[i], Lane{});
  std::array<Lane, sizeof(V) / sizeof(Lane)> lanes;
  std::memcpy(lanes.data(), &total, sizeof total);
  Sum sum = 0;
  for (Lane v : lanes) sum += static_cast<Sum>(v);
  return sum;
}

double sum_chains(const __m512 (&acc)[kChains]) { return sum_lanes<float, double>(acc); }
double sum_chains(const __m512i (&acc)[kChains]) { return sum_lanes<std::int32_t, double>(acc); }
double sum_chains(const __m256 (&acc)[kChains]) { return sum_lanes<float, double>(acc); }
double sum_chains(const __m256i (&acc)[kChains]) { return sum_lanes<std::int32_t, double>(acc); }

// The read loops' checksum: the 64-bit lanes of the eight accumulators, summed.
std::uint64_t sum_reads(const __m512i (&acc)[8]) {
  return sum_lanes<std::uint64_t, std::uint64_t>(acc);
}
std::uint64_t sum_reads(const __m256i (&acc)[8]) {
  return sum_lanes<std::uint64_t, std::uint64_t>(acc);
}

}  // namespace

#elif defined(__aarch64__)

namespace {

volatile float g_neon_multiplier = 0.999999f;
volatile float g_neon_addend = 1e-7f;
volatile std::int32_t g_neon_pattern = 0x01020304;

// As for x86-64 above.
void init_chains(float32x4_t (&acc)[kChains]) {
  for (std::size_t c = 0; c < kChains; ++c) acc[c] = vdupq_n_f32(static_cast<float>(c));
}
void init_chains(int32x4_t (&acc)[kChains]) {
  for (std::size_t c = 0; c < kChains; ++c) acc[c] = vdupq_n_s32(static_cast<int>(c));
}

double sum_chains(const float32x4_t (&acc)[kChains]) {
  float32x4_t total = acc[0];
  for (std::size_t c = 1; c < kChains; ++c) total = vaddq_f32(total, acc[c]);
  return static_cast<double>(vaddvq_f32(total));
}
double sum_chains(const int32x4_t (&acc)[kChains]) {
  int32x4_t total = acc[0];
  for (std::size_t c = 1; c < kChains; ++c) total = vaddq_s32(total, acc[c]);
  return static_cast<double>(vaddvq_s32(total));
}

std::uint64_t sum_reads(const uint64x2_t (&acc)[8]) {
  uint64x2_t total = acc[0];
  for (std::size_t j = 1; j < 8; ++j) total = vaddq_u64(total, acc[j]);
  return vgetq_lane_u64(total, 0) + vgetq_lane_u64(total, 1);
}

int8x16_t int8_operand() { return vreinterpretq_s8_s32(vdupq_n_s32(g_neon_pattern)); }

}  // namespace

#endif

#if defined(__x86_64__) || defined(__aarch64__)

namespace {

// The two loops that every rate below is measured with. Each caller is compiled for its
// extension and marked flatten, and passes its instruction as a lambda compiled for the same
// extension (an intrinsic of an extension inlines only into a function compiled for it): the
// loop, the lambda and the helpers above are all inlined into the caller, so its loop is the
// one instruction per chain and round (or per vector read), as if written out.

// kChains independent chains, each one dependent STEP per round; the checksum of the chains.
template <class V, class Step>
double chains(std::int64_t iterations, Step step) {
  V acc[kChains];
  init_chains(acc);
  for (std::int64_t i = 0; i < iterations; ++i)
    for (V& v : acc) step(v);
  return sum_chains(acc);
}

// Reads BYTES (a multiple of 8 vectors, aligned): eight accumulators, ADD folds each vector
// read into one of them; the checksum of the accumulators.
template <class V, class Add>
std::uint64_t reads(const std::byte* data, std::size_t bytes, Add add) {
  V acc[8] = {};
  for (std::size_t off = 0; off < bytes; off += 8 * sizeof(V))
    for (std::size_t j = 0; j < 8; ++j) add(acc[j], data + off + sizeof(V) * j);
  return sum_reads(acc);
}

}  // namespace

#endif

#if defined(__x86_64__)

__attribute__((target("avx512f"), flatten)) std::uint64_t read_avx512(const std::byte* data,
                                                                       std::size_t bytes) {
  const auto add = [](__m512i& a, const std::byte* p) __attribute__((target("avx512f"))) {
    a = _mm512_add_epi64(a, _mm512_load_si512(p));
  };
  return reads<__m512i>(data, bytes, add);
}

__attribute__((target("avx2"), flatten)) std::uint64_t read_avx2(const std::byte* data,
                                                                  std::size_t bytes) {
  const auto add = [](__m256i& a, const std::byte* p) __attribute__((target("avx2"))) {
    a = _mm256_add_epi64(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
  };
  return reads<__m256i>(data, bytes, add);
}

__attribute__((target("avx512f"), flatten)) double fma_avx512(std::int64_t iterations) {
  const __m512 a = _mm512_set1_ps(g_multiplier), b = _mm512_set1_ps(g_addend);
  return chains<__m512>(iterations, [&](__m512& v) __attribute__((target("avx512f"))) {
    v = _mm512_fmadd_ps(v, a, b);
  });
}

__attribute__((target("avx2,fma"), flatten)) double fma_avx2(std::int64_t iterations) {
  const __m256 a = _mm256_set1_ps(g_multiplier), b = _mm256_set1_ps(g_addend);
  return chains<__m256>(iterations, [&](__m256& v) __attribute__((target("avx2,fma"))) {
    v = _mm256_fmadd_ps(v, a, b);
  });
}

__attribute__((target("avx512f,avx512bf16"), flatten)) double bf16_dp_avx512(
    std::int64_t iterations) {
  const __m512 x = _mm512_set1_ps(g_multiplier), y = _mm512_set1_ps(g_addend);
  const __m512bh a = _mm512_cvtne2ps_pbh(x, x), b = _mm512_cvtne2ps_pbh(y, y);
  return chains<__m512>(iterations,
                        [&](__m512& v) __attribute__((target("avx512f,avx512bf16"))) {
                          v = _mm512_dpbf16_ps(v, a, b);
                        });
}

__attribute__((target("avx512f,avx512vnni"), flatten)) double vnni_avx512(
    std::int64_t iterations) {
  const __m512i a = _mm512_set1_epi32(g_int8_pattern), b = _mm512_set1_epi32(g_int8_pattern);
  return chains<__m512i>(iterations,
                         [&](__m512i& v) __attribute__((target("avx512f,avx512vnni"))) {
                           v = _mm512_dpbusd_epi32(v, a, b);
                         });
}

// The int8 product instructions of ymm machines. vpmaddubsw feeds its own output back (as
// unsigned bytes) so that each chain is one dependent instruction per round.
__attribute__((target("avx2"), flatten)) double maddubs_avx2(std::int64_t iterations) {
  const __m256i b = _mm256_set1_epi32(g_int8_pattern);
  return chains<__m256i>(iterations, [&](__m256i& v) __attribute__((target("avx2"))) {
    v = _mm256_maddubs_epi16(v, b);
  });
}

// The int16 product instruction of avx2_int16: vpmaddwd with the sum added back, one dependent
// multiply-add pair per chain and round, as the kernel's madd + add.
__attribute__((target("avx2"), flatten)) double maddwd_avx2(std::int64_t iterations) {
  const __m256i b = _mm256_set1_epi32(g_int8_pattern);
  return chains<__m256i>(iterations, [&](__m256i& v) __attribute__((target("avx2"))) {
    v = _mm256_madd_epi16(v, b);
  });
}

__attribute__((target("avx2,avxvnni"), flatten)) double vnni_avx(std::int64_t iterations) {
  const __m256i a = _mm256_set1_epi32(g_int8_pattern), b = _mm256_set1_epi32(g_int8_pattern);
  return chains<__m256i>(iterations, [&](__m256i& v) __attribute__((target("avx2,avxvnni"))) {
    v = _mm256_dpbusd_avx_epi32(v, a, b);
  });
}

namespace {

// The 64-byte tile configuration (palette 1): all eight tiles 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::array<std::uint8_t, 14> reserved{};
  std::array<std::uint16_t, 16> bytes_per_row{};
  std::array<std::uint8_t, 16> rows{};
};
static_assert(sizeof(TileConfig) == 64);

TileConfig full_tiles() {
  TileConfig config;
  for (std::size_t t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  return config;
}

// Operand tiles: 16 x 64 bytes of one 32-bit word (values do not change speed).
struct alignas(64) TileData {
  std::array<std::int32_t, 256> words{};
};

TileData operand_tile(std::int32_t word) {
  TileData d;
  d.words.fill(word);
  return d;
}

// Configures the tiles, zeroes the accumulators (tiles 0-3) and loads OPERAND into tiles 4-7.
__attribute__((target("amx-tile"))) void start_tiles(const TileConfig& config,
                                                     const TileData& operand) {
  _tile_loadconfig(&config);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand.words.data(), 64);
  _tile_loadd(5, operand.words.data(), 64);
  _tile_loadd(6, operand.words.data(), 64);
  _tile_loadd(7, operand.words.data(), 64);
}

// Stores the accumulators, releases the tiles and returns the accumulators' checksum (their
// words summed as integers, float bit patterns too: a checksum only).
__attribute__((target("amx-tile"))) double finish_tiles() {
  std::array<TileData, 4> out;
  _tile_stored(0, out[0].words.data(), 64);
  _tile_stored(1, out[1].words.data(), 64);
  _tile_stored(2, out[2].words.data(), 64);
  _tile_stored(3, out[3].words.data(), 64);
  _tile_release();
  double sum = 0;
  for (const TileData& t : out)
    for (std::int32_t w : t.words) sum += static_cast<double>(w);
  return sum;
}

// ITERATIONS rounds of DP, four tile products (each accumulator by two operand tiles).
template <class Dp>
double tile_products(std::int64_t iterations, std::int32_t operand_word, Dp dp) {
  const TileConfig config = full_tiles();
  const TileData operand = operand_tile(operand_word);
  start_tiles(config, operand);
  for (std::int64_t i = 0; i < iterations; ++i) dp();
  return finish_tiles();
}

}  // namespace

__attribute__((target("amx-tile,amx-int8"), flatten)) double amx_int8(std::int64_t iterations) {
  return tile_products(iterations, g_int8_pattern,
                       []() __attribute__((target("amx-tile,amx-int8"))) {
                         _tile_dpbssd(0, 4, 6);
                         _tile_dpbssd(1, 4, 7);
                         _tile_dpbssd(2, 5, 6);
                         _tile_dpbssd(3, 5, 7);
                       });
}

__attribute__((target("amx-tile,amx-bf16"), flatten)) double amx_bf16(std::int64_t iterations) {
  return tile_products(iterations, 0x3f803f80,  // pairs of bf16 1.0
                       []() __attribute__((target("amx-tile,amx-bf16"))) {
                         _tile_dpbf16ps(0, 4, 6);
                         _tile_dpbf16ps(1, 4, 7);
                         _tile_dpbf16ps(2, 5, 6);
                         _tile_dpbf16ps(3, 5, 7);
                       });
}

#else  // not x86-64: such a machine's Hardware has none of these features, so the limits
       // code never calls the loops below; they exist so the library links everywhere.

std::uint64_t read_avx512(const std::byte*, std::size_t) { return 0; }
std::uint64_t read_avx2(const std::byte*, std::size_t) { return 0; }
double fma_avx512(std::int64_t) { return 0; }
double fma_avx2(std::int64_t) { return 0; }
double bf16_dp_avx512(std::int64_t) { return 0; }
double vnni_avx512(std::int64_t) { return 0; }
double maddubs_avx2(std::int64_t) { return 0; }
double maddwd_avx2(std::int64_t) { return 0; }
double vnni_avx(std::int64_t) { return 0; }
double amx_int8(std::int64_t) { return 0; }
double amx_bf16(std::int64_t) { return 0; }

#endif

#if defined(__aarch64__)

__attribute__((flatten)) std::uint64_t read_neon(const std::byte* data, std::size_t bytes) {
  return reads<uint64x2_t>(data, bytes, [](uint64x2_t& a, const std::byte* p) {
    a = vaddq_u64(a, vld1q_u64(reinterpret_cast<const std::uint64_t*>(p)));
  });
}

__attribute__((flatten)) double fma_neon(std::int64_t iterations) {
  const float32x4_t a = vdupq_n_f32(g_neon_multiplier), b = vdupq_n_f32(g_neon_addend);
  return chains<float32x4_t>(iterations, [&](float32x4_t& v) { v = vfmaq_f32(b, v, a); });
}

// neon_int16's product: smlal of 4 int16 pairs into int32 lanes.
__attribute__((flatten)) double smlal_neon(std::int64_t iterations) {
  const int16x8_t a = vreinterpretq_s16_s8(int8_operand());
  return chains<int32x4_t>(iterations, [&](int32x4_t& v) {
    v = vmlal_s16(v, vget_low_s16(a), vget_high_s16(a));
  });
}

__attribute__((target("arch=armv8.2-a+dotprod"), flatten)) double sdot_neon(
    std::int64_t iterations) {
  const int8x16_t a = int8_operand();
  return chains<int32x4_t>(iterations,
                           [&](int32x4_t& v) __attribute__((target("arch=armv8.2-a+dotprod"))) {
                             v = vdotq_s32(v, a, a);
                           });
}

__attribute__((target("arch=armv8.2-a+i8mm"), flatten)) double smmla_neon(
    std::int64_t iterations) {
  const int8x16_t a = int8_operand();
  return chains<int32x4_t>(iterations,
                           [&](int32x4_t& v) __attribute__((target("arch=armv8.2-a+i8mm"))) {
                             v = vmmlaq_s32(v, a, a);
                           });
}

// SVE has no arrays of vectors: 16 named chains.
__attribute__((target("arch=armv8.2-a+sve"))) double sdot_sve(std::int64_t iterations) {
  static_assert(kChains == 16);
  const svint8_t a = svreinterpret_s8_s32(svdup_n_s32(g_neon_pattern));
  svint32_t c0 = svdup_n_s32(0), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
  svint32_t c8 = c0, c9 = c0, c10 = c0, c11 = c0, c12 = c0, c13 = c0, c14 = c0, c15 = c0;
  for (std::int64_t i = 0; i < iterations; ++i) {
    c0 = svdot_s32(c0, a, a), c1 = svdot_s32(c1, a, a), c2 = svdot_s32(c2, a, a);
    c3 = svdot_s32(c3, a, a), c4 = svdot_s32(c4, a, a), c5 = svdot_s32(c5, a, a);
    c6 = svdot_s32(c6, a, a), c7 = svdot_s32(c7, a, a), c8 = svdot_s32(c8, a, a);
    c9 = svdot_s32(c9, a, a), c10 = svdot_s32(c10, a, a), c11 = svdot_s32(c11, a, a);
    c12 = svdot_s32(c12, a, a), c13 = svdot_s32(c13, a, a), c14 = svdot_s32(c14, a, a);
    c15 = svdot_s32(c15, a, a);
  }
  const svbool_t all = svptrue_b32();
  svint32_t t = svadd_s32_x(all, svadd_s32_x(all, svadd_s32_x(all, c0, c1), svadd_s32_x(all, c2, c3)),
                            svadd_s32_x(all, svadd_s32_x(all, c4, c5), svadd_s32_x(all, c6, c7)));
  t = svadd_s32_x(all, t, svadd_s32_x(all, svadd_s32_x(all, svadd_s32_x(all, c8, c9), svadd_s32_x(all, c10, c11)),
                                      svadd_s32_x(all, svadd_s32_x(all, c12, c13), svadd_s32_x(all, c14, c15))));
  return static_cast<double>(svaddv_s32(all, t));
}

#else  // not aarch64: stubs, as above.

std::uint64_t read_neon(const std::byte*, std::size_t) { return 0; }
double fma_neon(std::int64_t) { return 0; }
double smlal_neon(std::int64_t) { return 0; }
double sdot_neon(std::int64_t) { return 0; }
double smmla_neon(std::int64_t) { return 0; }
double sdot_sve(std::int64_t) { return 0; }

#endif

}  // namespace mxmoe::perf::loops
