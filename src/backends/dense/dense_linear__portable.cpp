// The portable kernels of dense::Linear: they DEFINE the four numerics classes
// (linear_kernels.hpp); the ISA kernels are checked against their bits (tests/dense).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "backends/dense/linear_kernels.hpp"
#include "mxmoe/format.hpp"

namespace mxmoe::dense {

namespace {

float halving_tree(const float (&acc)[kLinearLanes]) noexcept {
  float s8[8], s4[4];
  for (int i = 0; i < 8; ++i) s8[i] = acc[i] + acc[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

float weight_at(const LinearF32Call& c, std::int64_t i) noexcept {
  return c.bf16 ? bf16_to_f32(static_cast<const std::uint16_t*>(c.w)[i])
                : static_cast<const float*>(c.w)[i];
}

// x86's conversion: round half to even, NaN or out of range -> INT_MIN; then [-127, 127].
std::int8_t code_of(float scaled) noexcept {
  const float r = std::nearbyint(scaled);
  const int q = (r >= -2147483648.0f && r < 2147483648.0f) ? static_cast<int>(r) : INT_MIN;
  return static_cast<std::int8_t>(std::clamp(q, -127, 127));
}

}  // namespace

float quantize_block32_portable(const float* v, int count, std::int8_t* codes) noexcept {
  float amax = 0.0f;
  for (int i = 0; i < count; ++i) amax = std::max(amax, std::fabs(v[i]));
  std::memset(codes, 0, kBlock);
  if (amax == 0.0f) return 0.0f;  // also all-NaN: std::max keeps the zero
  const float inv = 127.0f / amax;
  for (int i = 0; i < count; ++i) codes[i] = code_of(v[i] * inv);
  return amax / 127.0f;
}

std::uint16_t quantize_block32_int4(const float* v, int count, std::int8_t* codes) noexcept {
  float m = 0.0f;
  for (int i = 0; i < count; ++i)
    if (std::fabs(v[i]) > std::fabs(m)) m = v[i];  // the first of equal magnitudes; never a NaN
  std::memset(codes, 0, kBlock);
  const std::uint16_t d16 = f32_to_bf16(m / -8.0f);
  const float d = bf16_to_f32(d16);
  if (std::fpclassify(d) != FP_NORMAL) return 0;  // zero, subnormal, infinite (m never a NaN)
  for (int i = 0; i < count; ++i) {
    const float r = std::nearbyint(v[i] / d);
    const int q = (r >= -2147483648.0f && r < 2147483648.0f) ? static_cast<int>(r) : INT_MIN;
    codes[i] = static_cast<std::int8_t>(std::clamp(q, -8, 7));
  }
  return d16;
}

void dense_fp32_lanes16_linear__portable(const LinearF32Call& c, std::int64_t row0,
                                         std::int64_t rows) noexcept {
  for (std::int64_t t = 0; t < c.tokens; ++t) {
    const float* x = c.x + t * c.in;
    for (std::int64_t o = row0; o < row0 + rows; ++o) {
      float acc[kLinearLanes] = {};
      for (std::int64_t k = 0; k < c.in; ++k)
        acc[k % kLinearLanes] = std::fma(weight_at(c, o * c.in + k), x[k], acc[k % kLinearLanes]);
      const float s = halving_tree(acc);
      c.y[t * c.y_stride + o] = c.bias != nullptr ? s + c.bias[o] : s;
    }
  }
}

std::uint16_t round_x_bf16_portable(float x) noexcept {
  if (std::fpclassify(x) == FP_SUBNORMAL) x = std::copysign(0.0f, x);
  return f32_to_bf16(x);
}

namespace {

// A subnormal (of bf16 read as f32, or an f32 result) as a zero of its sign.
float flush(float v) noexcept {
  return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
}

}  // namespace

void dense_bf16_pairs16_linear__portable(const LinearF32Call& c, std::int64_t row0,
                                         std::int64_t rows) noexcept {
  const auto* w = static_cast<const std::uint16_t*>(c.w);
  // Element k of a row, +0 past `in` (the kernels' zero-filled tail).
  const auto at = [&](const std::uint16_t* row, std::int64_t k) {
    return k < c.in ? flush(bf16_to_f32(row[k])) : 0.0f;
  };
  float xb[kBf16MaxIn];  // check() keeps in <= kBf16MaxIn
  for (std::int64_t t = 0; t < c.tokens; ++t) {
    for (std::int64_t k = 0; k < c.in; ++k)
      xb[static_cast<std::size_t>(k)] =
          flush(bf16_to_f32(round_x_bf16_portable(c.x[t * c.in + k])));
    const auto x_at = [&](std::int64_t k) {
      return k < c.in ? xb[static_cast<std::size_t>(k)] : 0.0f;
    };
    for (std::int64_t o = row0; o < row0 + rows; ++o) {
      const std::uint16_t* row = w + o * c.in;
      float acc[kLinearLanes] = {};
      for (std::int64_t k0 = 0; k0 < c.in; k0 += kBf16Step)
        for (int l = 0; l < kLinearLanes; ++l) {
          const std::int64_t k = k0 + 2 * l;
          acc[l] = flush(std::fma(at(row, k + 1), x_at(k + 1), acc[l]));
          acc[l] = flush(std::fma(at(row, k), x_at(k), acc[l]));
        }
      const float s = halving_tree(acc);
      c.y[t * c.y_stride + o] = c.bias != nullptr ? s + c.bias[o] : s;
    }
  }
}

namespace {

// The compact classes' sums (dense_int8_rows16 and dense_int4_rows16): for each token, its
// activations quantized per block, then per row the blocks' exact integer sums, one FMA each.
// CODE(gb, i, k) is row i's code of element k of the group block at GB; SCALE(gb, i) its scale.
template <class Code, class Scale>
void compact_portable(const LinearCompactCall& c, std::int64_t row0, std::int64_t rows, Code code,
                      Scale scale) noexcept {
  const std::int64_t blocks = c.w.blocks;
  std::int8_t xq[kCompactMaxIn + kBlock];
  float dx[kCompactMaxIn / kBlock + 1];
  for (std::int64_t t = 0; t < c.tokens; ++t) {
    const float* x = c.x + t * c.in;
    for (std::int64_t b = 0; b < blocks; ++b)
      dx[b] = quantize_block32_portable(
          x + b * kBlock, static_cast<int>(std::min<std::int64_t>(kBlock, c.in - b * kBlock)),
          xq + b * kBlock);
    for (std::int64_t o = row0; o < row0 + rows; ++o) {
      const std::uint8_t* group = c.w.group(o / kCompactGroupRows);
      const int i = static_cast<int>(o % kCompactGroupRows);
      float acc = 0.0f;
      for (std::int64_t b = 0; b < blocks; ++b) {
        const std::uint8_t* gb = group + b * c.w.block_bytes;
        std::int32_t q = 0;
        for (int k = 0; k < kBlock; ++k)
          q += std::int32_t{code(gb, i, k)} * std::int32_t{xq[b * kBlock + k]};
        acc = std::fma(static_cast<float>(q), scale(gb, i) * dx[b], acc);
      }
      c.y[t * c.y_stride + o] = c.bias != nullptr ? acc + c.bias[o] : acc;
    }
  }
}

}  // namespace

void dense_int8_rows16_linear__portable(const LinearCompactCall& c, std::int64_t row0,
                                        std::int64_t rows) noexcept {
  compact_portable(
      c, row0, rows,
      [](const std::uint8_t* gb, int i, int k) {
        return static_cast<std::int8_t>(gb[64 * (k / 4) + 4 * i + k % 4]);
      },
      [](const std::uint8_t* gb, int i) {
        float dw;
        std::memcpy(&dw, gb + kCompactGroupCodeBytes + 4 * i, sizeof dw);
        return dw;
      });
}

void dense_int4_rows16_linear__portable(const LinearCompactCall& c, std::int64_t row0,
                                        std::int64_t rows) noexcept {
  compact_portable(
      c, row0, rows,
      [](const std::uint8_t* gb, int i, int k) {
        const std::uint8_t byte = gb[64 * (k / 8) + 4 * i + k % 4];
        return static_cast<std::int8_t>(((k % 8) < 4 ? byte & 0x0f : byte >> 4) - kCompact4Bias);
      },
      [](const std::uint8_t* gb, int i) {
        std::uint16_t d;
        std::memcpy(&d, gb + kCompact4GroupCodeBytes + 2 * i, sizeof d);
        return bf16_to_f32(d);
      });
}

}  // namespace mxmoe::dense
