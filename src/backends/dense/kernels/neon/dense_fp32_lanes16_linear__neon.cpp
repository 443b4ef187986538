// dense_fp32_lanes16 on Advanced SIMD (linear_kernels.hpp for the order): the 16 lanes of one
// (row, token) sum are four float32x4 (lanes 0-3, 4-7, 8-11, 12-15); a tile of R rows x T
// tokens widens each row's bf16 once per step. Compiled with the flags of the `neon` set.
#include <arm_neon.h>

#include <cstring>

#include "backends/dense/lanes16_neon.hpp"

namespace mxmoe::dense {
namespace {

float32x4_t load_w(const LinearF32Call& c, std::int64_t row, std::int64_t k) noexcept {
  if (c.bf16) {
    const auto* p = static_cast<const std::uint16_t*>(c.w) + row * c.in + k;
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
  }
  return vld1q_f32(static_cast<const float*>(c.w) + row * c.in + k);
}

template <std::size_t R, std::size_t T>
void tile(const LinearF32Call& c, std::int64_t o, std::int64_t t0) noexcept {
  float32x4_t acc[R][T][4];
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t q = 0; q < 4; ++q) acc[r][t][q] = vdupq_n_f32(0.0f);
  const float* x = c.x + t0 * c.in;
  const std::int64_t full = c.in / kLinearLanes * kLinearLanes;
  for (std::int64_t k = 0; k < full; k += kLinearLanes)
    for (std::size_t q = 0; q < 4; ++q) {
      float32x4_t w[R];
      for (std::size_t r = 0; r < R; ++r) w[r] = load_w(c, o + I(r), k + 4 * I(q));
      for (std::size_t t = 0; t < T; ++t) {
        const float32x4_t xv = vld1q_f32(x + I(t) * c.in + k + 4 * I(q));
        for (std::size_t r = 0; r < R; ++r) acc[r][t][q] = vfmaq_f32(acc[r][t][q], w[r], xv);
      }
    }
  if (full < c.in) {  // lanes past `in` keep their sums (a select, not a zero product)
    float wt[kLinearLanes], xt[kLinearLanes];
    std::uint32_t keep[kLinearLanes];
    for (int l = 0; l < kLinearLanes; ++l) keep[l] = full + l < c.in ? ~0u : 0u;
    const std::size_t n = static_cast<std::size_t>(c.in - full);
    for (std::size_t r = 0; r < R; ++r) {
      std::memset(wt, 0, sizeof wt);
      if (c.bf16) {
        std::uint16_t bits[kLinearLanes] = {};
        std::memcpy(bits, static_cast<const std::uint16_t*>(c.w) + (o + I(r)) * c.in + full, n * 2);
        for (std::size_t l = 0; l < kLinearLanes; ++l) {
          const std::uint32_t b32 = std::uint32_t{bits[l]} << 16;
          std::memcpy(&wt[l], &b32, 4);
        }
      } else {
        std::memcpy(wt, static_cast<const float*>(c.w) + (o + I(r)) * c.in + full, n * 4);
      }
      for (std::size_t t = 0; t < T; ++t) {
        std::memset(xt, 0, sizeof xt);
        std::memcpy(xt, x + I(t) * c.in + full, n * sizeof(float));
        for (std::size_t q = 0; q < 4; ++q)
          acc[r][t][q] = vbslq_f32(
              vld1q_u32(keep + 4 * q),
              vfmaq_f32(acc[r][t][q], vld1q_f32(wt + 4 * q), vld1q_f32(xt + 4 * q)), acc[r][t][q]);
      }
    }
  }
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < T; ++t)
      store(c.y + (t0 + I(t)) * c.y_stride + o + I(r), c.bias, o + I(r), reduce16(acc[r][t]));
}

template <std::size_t R, std::size_t T>
void sweep(const LinearF32Call& c, std::int64_t row0, std::int64_t rows, std::int64_t t0) noexcept {
  sweep_rows<R>(row0, rows, [&](std::int64_t o, auto r) { tile<decltype(r)::value, T>(c, o, t0); });
}

}  // namespace

void dense_fp32_lanes16_linear__neon(const LinearF32Call& c, std::int64_t row0,
                                     std::int64_t rows) noexcept {
  // 32 registers: 16 of sums (4 rows x 1 token, 2 x 2, 1 x 4), the rest for weights and x.
  for (std::int64_t t0 = 0; t0 < c.tokens; t0 += 4) {
    switch (std::min<std::int64_t>(4, c.tokens - t0)) {
      case 1:
        sweep<4, 1>(c, row0, rows, t0);
        break;
      case 2:
        sweep<2, 2>(c, row0, rows, t0);
        break;
      case 3:
        sweep<1, 3>(c, row0, rows, t0);
        break;
      default:
        sweep<1, 4>(c, row0, rows, t0);
        break;
    }
  }
}

}  // namespace mxmoe::dense
