// dense_int8_block32 on Advanced SIMD with the dot product (linear_kernels.hpp for the order):
// sdot gives each int32 lane the exact sum of 4 code products, so a block's 32 bytes are two
// int32x4 of its groups 0-3 and 4-7; an even block feeds lanes 0-7, an odd one 8-15. Also the
// activation quantizer in the class's rule (maxnm ignores a NaN as x86's max does here, and a
// NaN code is -127 as x86's conversion makes it). Flags of the `neon_dotprod` set.
#include <arm_neon.h>

#include <cstring>

#include "backends/dense/lanes16_neon.hpp"

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

void quantize_x(const float* x, std::int64_t in, std::int64_t pairs, std::int8_t* codes,
                float* scales) noexcept {
  for (std::int64_t b = 0; b < 2 * pairs; ++b) {
    if (b * kBlock >= in) {  // the pad block
      std::memset(codes + b * kBlock, 0, kBlock);
      scales[b] = 0.0f;
      continue;
    }
    scales[b] = quantize_block(x + b * kBlock, in - b * kBlock, codes + b * kBlock);
  }
}

template <std::size_t R, std::size_t T>
void tile(const LinearInt8Call& c, const std::int8_t* xq, const float* dx, std::int64_t o,
          std::int64_t t0) noexcept {
  const std::int64_t stride = 2 * c.w.pairs();
  float32x4_t acc[R][T][4];
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t q = 0; q < 4; ++q) acc[r][t][q] = vdupq_n_f32(0.0f);
  for (std::int64_t b = 0; b < stride; ++b) {
    const std::size_t lanes = static_cast<std::size_t>(b & 1) * 2;  // quarters 0-1 or 2-3
    int8x16_t w[R][2];
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t h = 0; h < 2; ++h)
        w[r][h] = vld1q_s8(c.w.codes + ((o + I(r)) * stride + b) * kBlock + 16 * I(h));
    for (std::size_t t = 0; t < T; ++t) {
      const std::int8_t* xb = xq + (I(t) * stride + b) * kBlock;
      const int8x16_t xv[2] = {vld1q_s8(xb), vld1q_s8(xb + 16)};
      const float dxb = dx[I(t) * stride + b];
      for (std::size_t r = 0; r < R; ++r) {
        const float d = c.w.scales[(o + I(r)) * stride + b] * dxb;
        for (std::size_t h = 0; h < 2; ++h) {
          const int32x4_t q = vdotq_s32(vdupq_n_s32(0), w[r][h], xv[h]);
          acc[r][t][lanes + h] = vfmaq_n_f32(acc[r][t][lanes + h], vcvtq_f32_s32(q), d);
        }
      }
    }
  }
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t)
      store(c.y + (t0 + I(t)) * c.y_stride + o + I(r), c.bias, o + I(r), reduce16(acc[r][t]));
}

template <std::size_t R, std::size_t T>
void sweep(const LinearInt8Call& c, const std::int8_t* xq, const float* dx, std::int64_t row0,
           std::int64_t rows, std::int64_t t0) noexcept {
  sweep_rows<R>(row0, rows,
                [&](std::int64_t o, auto r) { tile<decltype(r)::value, T>(c, xq, dx, o, t0); });
}

}  // namespace

void linear_int8_neon_dotprod(const LinearInt8Call& c, std::int64_t row0,
                              std::int64_t rows) noexcept {
  compact_token_tiles(c, &quantize_x,
                      [&](const std::int8_t* xq, const float* dx, std::int64_t t0, std::int64_t n) {
                        switch (n) {
                          case 1:
                            sweep<4, 1>(c, xq, dx, row0, rows, t0);
                            break;
                          case 2:
                            sweep<2, 2>(c, xq, dx, row0, rows, t0);
                            break;
                          case 3:
                            sweep<1, 3>(c, xq, dx, row0, rows, t0);
                            break;
                          default:
                            sweep<1, 4>(c, xq, dx, row0, rows, t0);
                            break;
                        }
                      });
}

}  // namespace mxmoe::dense
