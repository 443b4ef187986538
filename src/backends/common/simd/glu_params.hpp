// The expert nonlinearity as plain data for ISA kernels (which include no mxmoe headers with
// inline code): the values of mxmoe::ActivationFn, kept numeric here on purpose.
#pragma once

namespace mxmoe::simd {

inline constexpr int kGluSwigluOai = 0;
inline constexpr int kGluSilu = 1;
inline constexpr int kGluSiluClamp = 2;

struct GluParams {
  int fn = kGluSwigluOai;
  float alpha = 1.702f;
  float limit = 7.0f;
};

}  // namespace mxmoe::simd
