// AMX bf16 kernels: MXFP4 groups decoded to bf16 B tiles (scale folded into the exponent),
// TDPBF16PS with the fp32 C tiles resident for the whole K loop, 2 x 2 register blocking
// (two 16-token A tiles x two 16-output B tiles per K step: 4 products per 4 tile loads).
// GCC 12's AVX-512 intrinsics build "undefined" vectors by self-initialization, which
// -Wuninitialized reports inside the intrinsic headers; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backends/amx_bf16/bf16_amx_kernels.hpp"
#include "backends/common/amx/tile_config.hpp"
#include "backends/common/simd/glu_avx512.hpp"

namespace mxmoe::bf16_amx {
namespace {

// Blocks decoded ahead of their tile loads, so a TILELOADD never waits for the stores of the
// decode right before it; the ring holds the blocks in flight.
constexpr int kDecodeAhead = 2;
static_assert(kDecodeRing > kDecodeAhead);
constexpr std::size_t kPrefetchBytes =
    4096;  // into L2, as the VNNI decode (int8_block32__avx512_vnni.cpp)

// Decoding without masks: the table holds bf16(E2M1) + kBias for nonzero codes and 0 for
// both zeros (-0 becomes +0: a C tile that starts at +0 sums to the same bits either way).
// An unsigned saturating subtract of (kBias - offset_n) then gives bf16(E2M1) + offset_n,
// i.e. the value times 2^(e-127), for nonzero codes (no saturation: the smallest entry minus
// the largest subtrahend stays positive for foldable e) and saturates the zeros at 0.
// offset_n = (e_n - 127) << 7 moves the exponent field; kBias covers every foldable e.
constexpr std::uint16_t kBias = (simd::kMaxFoldableScale - 127) << 7;

// bf16 bits of the E2M1 codes 0..15: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
constexpr std::uint16_t kE2m1Bf16[16] = {0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040,
                                         0x4080, 0x40C0, 0x8000, 0xBF00, 0xBF80, 0xBFC0,
                                         0xC000, 0xC040, 0xC080, 0xC0C0};

// 32 entries, the 16 codes twice: vpermw reads 5 index bits and the decoder leaves the next
// nibble's low bit there.
struct alignas(64) CodeTable {
  std::uint16_t entry[32];
};
constexpr CodeTable make_code_table() {
  CodeTable t{};
  for (int i = 0; i < 32; ++i) {
    const int code = i & 15;
    t.entry[i] = (code & 7) == 0 ? 0 : static_cast<std::uint16_t>(kE2m1Bf16[code] + kBias);
  }
  return t;
}
constexpr CodeTable kCodeTable = make_code_table();

// 2^(e - 127) for 16 E8M0 codes, exactly: biased exponent e, or the subnormal 2^-127 for e = 0.
__m512 block_scales(__m512i e) {
  const __m512i normal = _mm512_slli_epi32(e, 23);
  const __mmask16 zero = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(zero, normal, _mm512_set1_epi32(0x400000)));
}

// Decodes one (group, block) into a B tile: 4 chunks of 64 bytes, nibble r of word j of
// chunk q is word j of B row 4q + r. Word 2n and 2n+1 of a row belong to output n, so the
// subtrahend (kBias - offset_n) fills both halves of dword n; unfolded: kBias everywhere.
__attribute__((always_inline)) inline void decode_block(const std::uint8_t* gb, bool fold,
                                                        __m512i table, std::uint16_t* tile) {
  __m512i sub = _mm512_set1_epi16(static_cast<short>(kBias));
  if (fold) {
    const __m512i e = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + group16::kNibbleBytes)));
    // kBias - offset_n = (kMaxFoldableScale - e_n) << 7
    const __m512i s =
        _mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(simd::kMaxFoldableScale), e), 7);
    sub = _mm512_or_si512(s, _mm512_slli_epi32(s, 16));
  }
  for (int q = 0; q < 4; ++q) {
    const __m512i w = _mm512_loadu_si512(gb + 64 * q);
    std::uint16_t* row = tile + 128 * q;
    _mm512_storeu_si512(row, _mm512_subs_epu16(_mm512_permutexvar_epi16(w, table), sub));
    _mm512_storeu_si512(
        row + 32, _mm512_subs_epu16(_mm512_permutexvar_epi16(_mm512_srli_epi16(w, 4), table), sub));
    _mm512_storeu_si512(
        row + 64, _mm512_subs_epu16(_mm512_permutexvar_epi16(_mm512_srli_epi16(w, 8), table), sub));
    _mm512_storeu_si512(
        row + 96,
        _mm512_subs_epu16(_mm512_permutexvar_epi16(_mm512_srli_epi16(w, 12), table), sub));
  }
}

// One group (16 outputs) for 16 token rows, K loop with the C tile resident (folded scales).
void gemm_folded_1x1(const std::uint16_t* b_tiles, int blocks, const std::uint16_t* a, float* out,
                     std::int64_t out_bytes) {
  _tile_zero(4);
  for (int b = 0; b < blocks; ++b) {
    _tile_loadd(2, b_tiles + static_cast<std::size_t>(b) * kBTileElems, 64);
    _tile_loadd(0, a + static_cast<std::size_t>(b) * kATileElems, 64);
    _tile_dpbf16ps(4, 0, 2);
  }
  _tile_stored(4, out, out_bytes);
}

// One unfolded group for 16 token rows: each block's product separately, then in fp32 and in
// block order acc = fma(C_b, 2^(e_b - 127), acc).
void gemm_unfolded_1x1(const std::uint16_t* b_tiles, const float* block_scale, int blocks,
                       const std::uint16_t* a, int rows, float* out, std::int64_t out_stride,
                       float* c_scratch) {
  __m512 acc[16];
  for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    _tile_zero(4);
    _tile_loadd(2, b_tiles + static_cast<std::size_t>(b) * kBTileElems, 64);
    _tile_loadd(0, a + static_cast<std::size_t>(b) * kATileElems, 64);
    _tile_dpbf16ps(4, 0, 2);
    _tile_stored(4, c_scratch, 64);
    const __m512 scale = _mm512_loadu_ps(block_scale + 16 * b);
    for (int r = 0; r < rows; ++r)  // the C tile holds only the configured rows
      acc[r] = _mm512_fmadd_ps(_mm512_load_ps(c_scratch + 16 * r), scale, acc[r]);
  }
  for (int r = 0; r < rows; ++r) _mm512_storeu_ps(out + r * out_stride, acc[r]);
}

}  // namespace

void bf16_amx_tiles_tile_config__amx_bf16(int rows) noexcept {
  // A 0-1 and C 4-7: `rows` rows x 64 bytes; B 2-3: 16 x 64 (K/2 x 16 outputs x 2).
  const auto m = static_cast<std::uint8_t>(rows);
  const amx_tiles::TileShape a{m, 64}, b{16, 64};
  const amx_tiles::TileShape shapes[8] = {a, a, b, b, a, a, a, a};
  amx_tiles::load_tile_config(shapes, 8);
}

void bf16_amx_tiles_tile_release__amx_bf16() noexcept {
  _tile_release();
}

void bf16_amx_tiles_round_rows__amx_bf16(const float* x, int blocks, std::uint16_t* row) noexcept {
  for (int b = 0; b < blocks; ++b) {
    std::uint16_t* dst = row + static_cast<std::size_t>(b) * kATileElems;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                        simd::to_bf16_rne(_mm512_loadu_ps(x + 32 * b)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16),
                        simd::to_bf16_rne(_mm512_loadu_ps(x + 32 * b + 16)));
  }
}

void bf16_amx_tiles_decode_group__amx_bf16(const std::uint8_t* group, int blocks, bool fold,
                                           std::uint16_t* b_tiles, float* block_scale) noexcept {
  const __m512i table = _mm512_load_si512(kCodeTable.entry);
  for (int b = 0; b < blocks; ++b) {
    const std::uint8_t* gb = group + static_cast<std::size_t>(b) * group16::kBlockBytes;
    if (!fold) {
      const __m512i e = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + group16::kNibbleBytes)));
      _mm512_storeu_ps(block_scale + 16 * b, block_scales(e));
    }
    decode_block(gb, fold, table, b_tiles + static_cast<std::size_t>(b) * kBTileElems);
  }
}

namespace {

// The B side of a K loop over one group pair: where block b's tiles are, and (when the pair
// is decoded in the loop) the decode of block b + kDecodeAhead as the vector work of
// iteration b, which the out-of-order core runs while the tile unit works. Decoding
// kDecodeAhead blocks ahead keeps a tile load from chasing its stores.
class PairStream {
 public:
  PairStream(const GroupPair& pair, int blocks)
      : pair_(pair),
        blocks_(blocks),
        decoding_(pair.packed[0] != nullptr),
        ring_(decoding_ && pair.ring),
        table_(_mm512_load_si512(kCodeTable.entry)) {
    if (decoding_)
      for (int b = 0; b < kDecodeAhead && b < blocks_; ++b) decode(b);
  }
  std::uint16_t* tile(int g, int b) const {
    const auto slot = static_cast<std::size_t>(ring_ ? b % kDecodeRing : b);
    return pair_.tiles[g] + slot * kBTileElems;
  }
  void vector_work(int b) const {
    if (decoding_ && b + kDecodeAhead < blocks_) decode(b + kDecodeAhead);
  }

 private:
  void decode(int b) const {
    const std::size_t at = static_cast<std::size_t>(b) * group16::kBlockBytes;
    for (std::size_t o = 0; o < group16::kBlockBytes; o += 64) {
      for (int g = 0; g < 2; ++g) {
        const std::uint8_t* ahead = pair_.packed[g] + at + kPrefetchBytes + o;
        _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T1);
      }
    }
    for (int g = 0; g < 2; ++g) decode_block(pair_.packed[g] + at, true, table_, tile(g, b));
  }

  const GroupPair& pair_;
  int blocks_;
  bool decoding_, ring_;
  __m512i table_;
};

const std::uint16_t* a_tile(const std::uint16_t* tiles, int b) {
  return tiles + static_cast<std::size_t>(b) * kATileElems;
}

}  // namespace

void bf16_amx_tiles_gemm_32x32__amx_bf16(const GroupPair& pair, int blocks, const std::uint16_t* a,
                                         std::int64_t a_tile_stride, int rows, float* out,
                                         std::int64_t out_stride, float* c_scratch) noexcept {
  const std::int64_t out_bytes = 4 * out_stride;
  const std::uint16_t* a1 = a + a_tile_stride;
  float* out1 = out + 16 * out_stride;
  if (!pair.fold[0] || !pair.fold[1]) {  // rare (extreme scales): one group, 16 rows at a time
    for (int t0 = 0; t0 < rows; t0 += 16) {
      for (int g = 0; g < 2; ++g) {
        const std::uint16_t* at = t0 == 0 ? a : a1;
        float* o = (t0 == 0 ? out : out1) + 16 * g;
        if (pair.fold[g]) {
          gemm_folded_1x1(pair.tiles[g], blocks, at, o, out_bytes);
        } else {
          gemm_unfolded_1x1(pair.tiles[g], pair.block_scale[g], blocks, at,
                            rows - t0 < 16 ? rows - t0 : 16, o, out_stride, c_scratch);
        }
      }
    }
    return;
  }
  const PairStream w(pair, blocks);
  _tile_zero(4);
  _tile_zero(5);
  if (rows > 16) {
    _tile_zero(6);
    _tile_zero(7);
    for (int b = 0; b < blocks; ++b) {
      w.vector_work(b);
      _tile_loadd(2, w.tile(0, b), 64);
      _tile_loadd(3, w.tile(1, b), 64);
      _tile_loadd(0, a_tile(a, b), 64);
      _tile_dpbf16ps(4, 0, 2);
      _tile_dpbf16ps(5, 0, 3);
      _tile_loadd(1, a_tile(a1, b), 64);
      _tile_dpbf16ps(6, 1, 2);
      _tile_dpbf16ps(7, 1, 3);
    }
    _tile_stored(6, out1, out_bytes);
    _tile_stored(7, out1 + 16, out_bytes);
  } else {
    for (int b = 0; b < blocks; ++b) {
      w.vector_work(b);
      _tile_loadd(2, w.tile(0, b), 64);
      _tile_loadd(3, w.tile(1, b), 64);
      _tile_loadd(0, a_tile(a, b), 64);
      _tile_dpbf16ps(4, 0, 2);
      _tile_dpbf16ps(5, 0, 3);
    }
  }
  _tile_stored(4, out, out_bytes);
  _tile_stored(5, out + 16, out_bytes);
}

void bf16_amx_tiles_glu_to_bf16__amx_bf16(const float* h, int rows, const float* gate_bias,
                                          const float* up_bias, const simd::GluParams& p,
                                          std::uint16_t* a, std::int64_t a_tile_stride) noexcept {
  for (int t = 0; t < rows; ++t) {
    __m512 a0, a1;
    simd::glu_row32(h + 64 * t, gate_bias, up_bias, p, a0, a1);
    std::uint16_t* dst = a + (t / 16) * a_tile_stride + (t % 16) * 32;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), simd::to_bf16_rne(a0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16), simd::to_bf16_rne(a1));
  }
}

}  // namespace mxmoe::bf16_amx
