// dense_int8_rows16 on AVX2 (linear_kernels.hpp for the order), on codes packed as rows16: a
// ymm of a group's block is 8 rows' 4 consecutive codes, so vpmaddubsw on |w| and sign(x, w)
// (x a broadcast of 4 activation codes; no int16 saturation, codes are in [-127, 127]) then
// vpmaddwd by ones adds 4 products to each row's block sum. A group's block is two ymm halves
// (rows 0-7 and 8-15); each |w| serves two tokens (the registers hold two tokens' sums and
// accumulators). Also the activation quantizer, which the avx512_vnni kernel shares. Flags of
// the `avx2` set.
// dense_int4_rows16 runs the same loop on its nibbles: unsigned codes need no sign trick
// (vpmaddubsw takes them as they are: a pair sums to at most 2 * 15 * 127), the low and high
// nibbles of a ymm are two operands, and each block's sum starts at -8 * sum(x codes).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/dense/tiles.hpp"

namespace mxmoe::dense {
namespace {

// Elements [0, n) of 8 floats, zero past n (n may exceed 8 or be negative).
__m256 load_part(const float* p, std::int64_t n) noexcept {
  if (n >= 8) return _mm256_loadu_ps(p);
  if (n <= 0) return _mm256_setzero_ps();
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane));
}

// One block of `n` values (1..32): its 32 codes and scale (quantize_block32_portable's rule).
float quantize_block(const float* v, std::int64_t n, std::int8_t* codes) noexcept {
  __m256 part[4];
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    part[i] = load_part(v + 8 * i, n - 8 * i);
    amax = _mm256_max_ps(_mm256_and_ps(part[i], abs_mask), amax);  // a NaN gives amax back
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float a = _mm_cvtss_f32(m);
  if (a == 0.0f) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), _mm256_setzero_si256());
    return 0.0f;
  }
  const __m256 inv = _mm256_set1_ps(127.0f / a);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(part[i], inv));
    q[i] =
        _mm256_min_epi32(_mm256_max_epi32(q[i], _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
  }
  const __m256i bytes =
      _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  _mm256_storeu_si256(
      reinterpret_cast<__m256i*>(codes),
      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  return a / 127.0f;
}

__m256i broadcast_4_codes(const std::int8_t* p) noexcept {
  std::int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

__m256i load32(const std::uint8_t* p) noexcept {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// How each compact class's group block reads: half H (rows 8 H .. 8 H + 7) of the two operands
// of codes 8 c .. 8 c + 7 (operands), the pairs' products of one operand by 4 activation codes
// (pairs: vpmaddubsw's 16-bit sums), the half's 8 scales, and the excess of unsigned codes.
struct Int8Codes {  // dense_int8_rows16 on signed rows16 codes: |w| times x with w's sign
  static constexpr std::int64_t kBias = 0;
  struct Operand {
    __m256i abs, sign;
  };
  static void operands(const std::uint8_t* gb, int c, std::size_t h, Operand (&w)[2]) noexcept {
    for (int p = 0; p < 2; ++p) {
      w[p].sign = load32(gb + 64 * (2 * c + p) + 32 * I(h));
      w[p].abs = _mm256_abs_epi8(w[p].sign);
    }
  }
  static __m256i pairs(const Operand& w, __m256i xv) noexcept {
    return _mm256_maddubs_epi16(w.abs, _mm256_sign_epi8(xv, w.sign));
  }
  static __m256 scales(const std::uint8_t* gb, std::size_t h) noexcept {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(gb + kCompactGroupCodeBytes) + 8 * I(h));
  }
};
struct Int4Codes {  // dense_int4_rows16: unsigned nibbles
  static constexpr std::int64_t kBias = kCompact4Bias;
  using Operand = __m256i;
  static void operands(const std::uint8_t* gb, int c, std::size_t h, Operand (&w)[2]) noexcept {
    const __m256i nibble = _mm256_set1_epi8(0x0f);
    const __m256i v = load32(gb + 64 * c + 32 * I(h));
    w[0] = _mm256_and_si256(v, nibble);
    w[1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
  }
  static __m256i pairs(const Operand& w, __m256i xv) noexcept {
    return _mm256_maddubs_epi16(w, xv);
  }
  static __m256 scales(const std::uint8_t* gb, std::size_t h) noexcept {
    const __m128i d =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + kCompact4GroupCodeBytes + 16 * I(h)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(d), 16));
  }
};

// Group GROUP (its first row O, VALID rows stored) for tokens tt .. tt + T of the tile, whose
// outputs go to the call's tokens t0 + tt ... CORR: each token's blocks' corrections (the
// classes with unsigned codes).
template <class Codes, std::size_t T>
void group_tile(const LinearCompactCall& c, const std::uint8_t* group, std::int64_t o, int valid,
                const std::int8_t* xq, const float* dx, const std::int32_t* corr, std::int64_t tt,
                std::int64_t t0) noexcept {
  const std::int64_t blocks = c.w.blocks;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T][2];
  for (std::size_t t = 0; t < T; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* gb = group + b * c.w.block_bytes;
    prefetch_group_block(gb, c.w.block_bytes);
    __m256i dot[T][2];
    for (std::size_t t = 0; t < T; ++t)
      dot[t][0] = dot[t][1] = Codes::kBias == 0 ? _mm256_setzero_si256()
                                                : _mm256_set1_epi32(corr[(tt + I(t)) * blocks + b]);
    for (int k8 = 0; k8 < 4; ++k8) {
      typename Codes::Operand w[2][2];  // [half][operand]
      for (std::size_t h = 0; h < 2; ++h) Codes::operands(gb, k8, h, w[h]);
      for (std::size_t t = 0; t < T; ++t) {
        const std::int8_t* xb = xq + ((tt + I(t)) * blocks + b) * kBlock + 8 * k8;
        const __m256i x0 = broadcast_4_codes(xb), x1 = broadcast_4_codes(xb + 4);
        for (std::size_t h = 0; h < 2; ++h) {
          dot[t][h] =
              _mm256_add_epi32(dot[t][h], _mm256_madd_epi16(Codes::pairs(w[h][0], x0), ones));
          dot[t][h] =
              _mm256_add_epi32(dot[t][h], _mm256_madd_epi16(Codes::pairs(w[h][1], x1), ones));
        }
      }
    }
    for (std::size_t h = 0; h < 2; ++h) {
      const __m256 dw = Codes::scales(gb, h);
      for (std::size_t t = 0; t < T; ++t) {
        const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(dx[(tt + I(t)) * blocks + b]));
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[t][h]), scale, acc[t][h]);
      }
    }
  }
  for (std::size_t t = 0; t < T; ++t) {
    float* y = c.y + (t0 + tt + I(t)) * c.y_stride + o;
    alignas(32) float v[kCompactGroupRows];
    _mm256_store_ps(v, acc[t][0]);
    _mm256_store_ps(v + 8, acc[t][1]);
    for (int i = 0; i < valid; ++i) store(y + i, c.bias, o + i, v[i]);
  }
}

}  // namespace

void dense_rows16_quantize__avx2(const float* x, std::int64_t in, std::int64_t blocks,
                                 std::int8_t* codes, float* scales) noexcept {
  for (std::int64_t b = 0; b < blocks; ++b)
    scales[b] = quantize_block(x + b * kBlock, in - b * kBlock, codes + b * kBlock);
}

namespace {

template <class Codes>
void linear_compact(const LinearCompactCall& c, std::int64_t row0, std::int64_t rows) noexcept {
  two_token_compact<Codes::kBias>(
      c, row0, rows, &dense_rows16_quantize__avx2,
      [&](auto T, auto&&... tile) { group_tile<Codes, decltype(T)::value>(c, tile...); });
}

}  // namespace

void dense_int8_rows16_linear__avx2(const LinearCompactCall& c, std::int64_t row0,
                                    std::int64_t rows) noexcept {
  linear_compact<Int8Codes>(c, row0, rows);
}

void dense_int4_rows16_linear__avx2(const LinearCompactCall& c, std::int64_t row0,
                                    std::int64_t rows) noexcept {
  linear_compact<Int4Codes>(c, row0, rows);
}

}  // namespace mxmoe::dense
