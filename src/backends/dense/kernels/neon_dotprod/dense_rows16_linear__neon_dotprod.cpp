// dense_int8_rows16 on Advanced SIMD with the dot product (linear_kernels.hpp for the order), on
// codes packed as rows16: 16 bytes of a group's block are 4 rows' 4 consecutive codes, so sdot
// by one lane of the activations (4 codes) adds 4 products to each of the 4 rows' block sums;
// a block of 16 rows is 32 sdot per token. Two tokens share each weight load. Also the
// activation quantizer in the class's rule (maxnm ignores a NaN as x86's max does here, and a
// NaN code is -127 as x86's conversion makes it). Flags of the `neon_dotprod` set.
// dense_int4_rows16 runs the same loop on its nibbles: the low and high nibbles of 16 code
// bytes are two sdot operands (unsigned codes in [0, 15] are non-negative int8), and each
// block's sum starts at -8 * sum(x codes).
#include <arm_neon.h>

#include <cstring>

#include "backends/dense/tiles.hpp"

namespace mxmoe::dense {
namespace {

float quantize_block(const float* v, std::int64_t n, std::int8_t* codes) noexcept {
  float buf[kBlock] = {};
  std::memcpy(buf, v, static_cast<std::size_t>(std::min<std::int64_t>(n, kBlock)) * sizeof(float));
  float32x4_t part[8];
  float32x4_t amax = vdupq_n_f32(0.0f);
  for (int i = 0; i < 8; ++i) {
    part[i] = vld1q_f32(buf + 4 * i);
    amax = vmaxnmq_f32(amax, vabsq_f32(part[i]));
  }
  const float a = vmaxnmvq_f32(amax);
  if (a == 0.0f) {
    std::memset(codes, 0, kBlock);
    return 0.0f;
  }
  const float32x4_t inv = vdupq_n_f32(127.0f / a);
  int16x8_t q16[4];
  for (int i = 0; i < 4; ++i) {
    int32x4_t q[2];
    for (int h = 0; h < 2; ++h) {
      const float32x4_t s = vmulq_f32(part[2 * i + h], inv);
      q[h] = vbslq_s32(vceqq_f32(s, s), vcvtnq_s32_f32(s), vdupq_n_s32(-127));
      q[h] = vminq_s32(vmaxq_s32(q[h], vdupq_n_s32(-127)), vdupq_n_s32(127));
    }
    q16[i] = vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1]));
  }
  vst1q_s8(codes, vcombine_s8(vmovn_s16(q16[0]), vmovn_s16(q16[1])));
  vst1q_s8(codes + 16, vcombine_s8(vmovn_s16(q16[2]), vmovn_s16(q16[3])));
  return a / 127.0f;
}

void quantize_x(const float* x, std::int64_t in, std::int64_t blocks, std::int8_t* codes,
                float* scales) noexcept {
  for (std::int64_t b = 0; b < blocks; ++b)
    scales[b] = quantize_block(x + b * kBlock, in - b * kBlock, codes + b * kBlock);
}

// dot[q] += rows 4q..4q+3's codes of W (k4 group K4) times the activations' codes 4 K4 ...
// (lane K4 % 4 of xv[K4 / 4]).
template <int K4>
void dot_step(const int8x16_t (&xv)[2], int32x4_t (&dot)[4], const int8x16_t (&w)[4]) noexcept {
  for (std::size_t q = 0; q < 4; ++q) dot[q] = vdotq_laneq_s32(dot[q], w[q], xv[K4 / 4], K4 % 4);
}

// How each compact class's group block reads: quarter Q (rows 4 Q .. 4 Q + 3) of the two sdot
// operands of codes 8 c .. 8 c + 7, the 4 rows' scales, and the excess of unsigned codes.
struct Int8Codes {  // dense_int8_rows16 on signed rows16 codes
  static constexpr std::int64_t kBias = 0;
  static void operands(const std::uint8_t* gb, int c, std::size_t q, int8x16_t (&w)[2]) noexcept {
    for (int p = 0; p < 2; ++p)
      w[p] = vreinterpretq_s8_u8(vld1q_u8(gb + 64 * (2 * c + p) + 16 * I(q)));
  }
  static float32x4_t scales(const std::uint8_t* gb, std::size_t q) noexcept {
    return vld1q_f32(reinterpret_cast<const float*>(gb + kCompactGroupCodeBytes) + 4 * I(q));
  }
};
struct Int4Codes {  // dense_int4_rows16: unsigned nibbles
  static constexpr std::int64_t kBias = kCompact4Bias;
  static void operands(const std::uint8_t* gb, int c, std::size_t q, int8x16_t (&w)[2]) noexcept {
    const uint8x16_t v = vld1q_u8(gb + 64 * c + 16 * I(q));
    w[0] = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f)));
    w[1] = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
  }
  static float32x4_t scales(const std::uint8_t* gb, std::size_t q) noexcept {
    const uint16x4_t d =
        vld1_u16(reinterpret_cast<const std::uint16_t*>(gb + kCompact4GroupCodeBytes) + 4 * I(q));
    return vreinterpretq_f32_u32(vshll_n_u16(d, 16));
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
  float32x4_t acc[T][4];
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t q = 0; q < 4; ++q) acc[t][q] = vdupq_n_f32(0.0f);
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* gb = group + b * c.w.block_bytes;
    prefetch_group_block(gb, c.w.block_bytes);
    int8x16_t xv[T][2];
    int32x4_t dot[T][4];
    for (std::size_t t = 0; t < T; ++t) {
      const std::int8_t* xb = xq + ((tt + I(t)) * blocks + b) * kBlock;
      xv[t][0] = vld1q_s8(xb);
      xv[t][1] = vld1q_s8(xb + 16);
      const std::int32_t start = Codes::kBias == 0 ? 0 : corr[(tt + I(t)) * blocks + b];
      for (std::size_t q = 0; q < 4; ++q) dot[t][q] = vdupq_n_s32(start);
    }
    auto k8_step = [&](auto k8) {
      constexpr int K8 = decltype(k8)::value;
      int8x16_t w[2][4];  // [operand][quarter]
      for (std::size_t q = 0; q < 4; ++q) {
        int8x16_t pair[2];
        Codes::operands(gb, K8, q, pair);
        w[0][q] = pair[0];
        w[1][q] = pair[1];
      }
      for (std::size_t t = 0; t < T; ++t) {
        dot_step<2 * K8>(xv[t], dot[t], w[0]);
        dot_step<2 * K8 + 1>(xv[t], dot[t], w[1]);
      }
    };
    k8_step(std::integral_constant<int, 0>{});
    k8_step(std::integral_constant<int, 1>{});
    k8_step(std::integral_constant<int, 2>{});
    k8_step(std::integral_constant<int, 3>{});
    for (std::size_t q = 0; q < 4; ++q) {
      const float32x4_t w = Codes::scales(gb, q);
      for (std::size_t t = 0; t < T; ++t)
        acc[t][q] = vfmaq_f32(acc[t][q], vcvtq_f32_s32(dot[t][q]),
                              vmulq_n_f32(w, dx[(tt + I(t)) * blocks + b]));
    }
  }
  for (std::size_t t = 0; t < T; ++t) {
    float* y = c.y + (t0 + tt + I(t)) * c.y_stride + o;
    float v[kCompactGroupRows];
    for (std::size_t q = 0; q < 4; ++q) vst1q_f32(v + 4 * I(q), acc[t][q]);
    for (int i = 0; i < valid; ++i) store(y + i, c.bias, o + i, v[i]);
  }
}

template <class Codes>
void linear_compact(const LinearCompactCall& c, std::int64_t row0, std::int64_t rows) noexcept {
  two_token_compact<Codes::kBias>(c, row0, rows, &quantize_x, [&](auto T, auto&&... tile) {
    group_tile<Codes, decltype(T)::value>(c, tile...);
  });
}

}  // namespace

void dense_int8_rows16_linear__neon_dotprod(const LinearCompactCall& c, std::int64_t row0,
                                            std::int64_t rows) noexcept {
  linear_compact<Int8Codes>(c, row0, rows);
}

void dense_int4_rows16_linear__neon_dotprod(const LinearCompactCall& c, std::int64_t row0,
                                            std::int64_t rows) noexcept {
  linear_compact<Int4Codes>(c, row0, rows);
}

}  // namespace mxmoe::dense
