// dense_int8_rows16 on Advanced SIMD with the dot product (linear_kernels.hpp for the order), on
// codes packed as rows16: 16 bytes of a group's block are 4 rows' 4 consecutive codes, so sdot
// by one lane of the activations (4 codes) adds 4 products to each of the 4 rows' block sums;
// a block of 16 rows is 32 sdot per token. Two tokens share each weight load. Also the
// activation quantizer in the class's rule (maxnm ignores a NaN as x86's max does here, and a
// NaN code is -127 as x86's conversion makes it). Flags of the `neon_dotprod` set.
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

// Group GROUP (its first row O, VALID rows stored) for tokens tt .. tt + T of the tile, whose
// outputs go to the call's tokens t0 + tt ...
template <std::size_t T>
void group_tile(const LinearInt8Call& c, const std::uint8_t* group, std::int64_t o, int valid,
                const std::int8_t* xq, const float* dx, std::int64_t tt, std::int64_t t0) noexcept {
  const std::int64_t blocks = c.w.blocks;
  float32x4_t acc[T][4];
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t q = 0; q < 4; ++q) acc[t][q] = vdupq_n_f32(0.0f);
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* gb = group + b * kCompactGroupBlockBytes;
    prefetch_group_block(gb);
    int8x16_t xv[T][2];
    int32x4_t dot[T][4];
    for (std::size_t t = 0; t < T; ++t) {
      const std::int8_t* xb = xq + ((tt + I(t)) * blocks + b) * kBlock;
      xv[t][0] = vld1q_s8(xb);
      xv[t][1] = vld1q_s8(xb + 16);
      for (std::size_t q = 0; q < 4; ++q) dot[t][q] = vdupq_n_s32(0);
    }
    auto k4_step = [&](auto k4) {
      constexpr int K4 = decltype(k4)::value;
      int8x16_t w[4];
      for (std::size_t q = 0; q < 4; ++q)
        w[q] = vreinterpretq_s8_u8(vld1q_u8(gb + 64 * K4 + 16 * I(q)));
      for (std::size_t t = 0; t < T; ++t) dot_step<K4>(xv[t], dot[t], w);
    };
    k4_step(std::integral_constant<int, 0>{});
    k4_step(std::integral_constant<int, 1>{});
    k4_step(std::integral_constant<int, 2>{});
    k4_step(std::integral_constant<int, 3>{});
    k4_step(std::integral_constant<int, 4>{});
    k4_step(std::integral_constant<int, 5>{});
    k4_step(std::integral_constant<int, 6>{});
    k4_step(std::integral_constant<int, 7>{});
    const auto* dw = reinterpret_cast<const float*>(gb + kCompactGroupCodeBytes);
    for (std::size_t q = 0; q < 4; ++q) {
      const float32x4_t w = vld1q_f32(dw + 4 * I(q));
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

}  // namespace

void linear_int8_neon_dotprod(const LinearInt8Call& c, std::int64_t row0,
                              std::int64_t rows) noexcept {
  compact_token_tiles(c, &quantize_x,
                      [&](const std::int8_t* xq, const float* dx, std::int64_t t0, std::int64_t n) {
                        sweep_groups_two_tokens(
                            c.w, row0, rows, n,
                            [&](auto T, const std::uint8_t* group, std::int64_t o, int valid,
                                std::int64_t tt) {
                              group_tile<decltype(T)::value>(c, group, o, valid, xq, dx, tt, t0);
                            });
                      });
}

}  // namespace mxmoe::dense
