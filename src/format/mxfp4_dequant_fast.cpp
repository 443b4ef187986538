// Vectorized MXFP4 decoding. The library is built for the baseline x86-64 ISA, so the AVX2
// and AVX-512 bodies carry target attributes; the caller names the one to run
// (fastest_mxfp4_decoder of its capped probe), and the CPU query here only refuses one the
// processor lacks. They live only in
// this .cpp file: an ISA-targeted inline function in a header could be merged (ODR) with a
// baseline copy and run on the wrong CPU.
#include <cstddef>
#include <cstdint>
#include <span>

#include "format/mx_codes.hpp"
#include "format/mx_scale.hpp"
#include "format/mxfp4_dequant_kernels.hpp"
#include "mxmoe/format.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MXMOE_FORMAT_X86 1
#else
#define MXMOE_FORMAT_X86 0
#endif

namespace mxmoe::format_detail {

#if MXMOE_FORMAT_X86

bool cpu_has_avx2() noexcept {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
bool cpu_has_avx512() noexcept {
  return __builtin_cpu_supports("avx512f");
}

namespace {

// 32 codes of one block in element order: bytes 0..15 = elements 0..15, 16..31 in `high`.
// Element 2j is the low nibble of byte j, 2j+1 the high one: interleaving the two nibble
// vectors byte by byte restores element order.
inline void unpack_codes_sse2(const std::uint8_t* bytes, __m128i& low, __m128i& high) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes));
  const __m128i nibble_mask = _mm_set1_epi8(0x0F);
  const __m128i even = _mm_and_si128(packed, nibble_mask);
  const __m128i odd = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble_mask);
  low = _mm_unpacklo_epi8(even, odd);
  high = _mm_unpackhi_epi8(even, odd);
}

__attribute__((target("avx2,fma"))) inline __m256 decode8_avx2(__m128i codes8, __m256 magnitudes,
                                                               __m256 scale) {
  const __m256i codes = _mm256_cvtepu8_epi32(codes8);
  // permutevar8x32 reads the low 3 bits (the magnitude); bit 3 is the sign, moved to bit 31.
  const __m256 magnitude = _mm256_permutevar8x32_ps(magnitudes, codes);
  const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(codes, 28),
                                        _mm256_set1_epi32(static_cast<int>(0x80000000u)));
  return _mm256_mul_ps(_mm256_xor_ps(magnitude, _mm256_castsi256_ps(sign)), scale);
}

}  // namespace

__attribute__((target("avx2,fma"))) void dequantize_mxfp4_rows_avx2(const std::uint8_t* packed,
                                                                    const std::uint8_t* scales,
                                                                    std::size_t blocks,
                                                                    float* out) noexcept {
  const __m256 magnitudes = _mm256_loadu_ps(kE2m1Values);  // codes 0..7
  for (std::size_t b = 0; b < blocks; ++b) {
    const __m256 scale = _mm256_set1_ps(e8m0_to_float(scales[b]));
    __m128i low, high;
    unpack_codes_sse2(packed + b * kMxfp4BlockBytes, low, high);
    float* y = out + b * kMxBlock;
    _mm256_storeu_ps(y, decode8_avx2(low, magnitudes, scale));
    _mm256_storeu_ps(y + 8, decode8_avx2(_mm_srli_si128(low, 8), magnitudes, scale));
    _mm256_storeu_ps(y + 16, decode8_avx2(high, magnitudes, scale));
    _mm256_storeu_ps(y + 24, decode8_avx2(_mm_srli_si128(high, 8), magnitudes, scale));
  }
}

__attribute__((target("avx512f"))) void dequantize_mxfp4_rows_avx512(const std::uint8_t* packed,
                                                                     const std::uint8_t* scales,
                                                                     std::size_t blocks,
                                                                     float* out) noexcept {
  const __m512 values = _mm512_loadu_ps(kE2m1Values);  // all 16 codes, sign included
  for (std::size_t b = 0; b < blocks; ++b) {
    const __m512 scale = _mm512_set1_ps(e8m0_to_float(scales[b]));
    __m128i low, high;
    unpack_codes_sse2(packed + b * kMxfp4BlockBytes, low, high);
    // The all-ones zero-masking forms: the plain intrinsics start from _mm512_undefined_*,
    // which g++ 12 flags with -Wmaybe-uninitialized. Same instructions, same result.
    const __mmask16 all = 0xFFFF;
    const __m512 first =
        _mm512_maskz_permutexvar_ps(all, _mm512_maskz_cvtepu8_epi32(all, low), values);
    const __m512 second =
        _mm512_maskz_permutexvar_ps(all, _mm512_maskz_cvtepu8_epi32(all, high), values);
    float* y = out + b * kMxBlock;
    _mm512_storeu_ps(y, _mm512_mul_ps(first, scale));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(second, scale));
  }
}

#else  // not x86: only the portable decoder exists

bool cpu_has_avx2() noexcept {
  return false;
}
bool cpu_has_avx512() noexcept {
  return false;
}
void dequantize_mxfp4_rows_avx2(const std::uint8_t* packed, const std::uint8_t* scales,
                                std::size_t blocks, float* out) noexcept {
  dequantize_mxfp4_rows_portable(packed, scales, blocks, out);
}
void dequantize_mxfp4_rows_avx512(const std::uint8_t* packed, const std::uint8_t* scales,
                                  std::size_t blocks, float* out) noexcept {
  dequantize_mxfp4_rows_portable(packed, scales, blocks, out);
}

#endif

}  // namespace mxmoe::format_detail

namespace mxmoe {

void dequantize_mxfp4_fast(std::span<const std::uint8_t> packed,
                           std::span<const std::uint8_t> scales, std::span<float> out,
                           Mxfp4Decoder decoder) {
  const std::size_t blocks = scales.size();
  format_detail::require(
      packed.size() == blocks * kMxfp4BlockBytes && out.size() == blocks * kMxBlock,
      "dequantize_mxfp4_fast: packed/out sizes do not match scales");
  // The caller chose from its (capped) probe; the CPU query here only refuses a decoder the
  // processor cannot run, so a wrong choice is an error and not an illegal instruction.
  format_detail::Mxfp4DequantFn decode = format_detail::dequantize_mxfp4_rows_portable;
  switch (decoder) {
    case Mxfp4Decoder::portable:
      break;
    case Mxfp4Decoder::avx2:
      format_detail::require(format_detail::cpu_has_avx2(),
                             "dequantize_mxfp4_fast: the avx2 decoder needs AVX2 and FMA, which "
                             "this CPU or build lacks");
      decode = format_detail::dequantize_mxfp4_rows_avx2;
      break;
    case Mxfp4Decoder::avx512:
      format_detail::require(format_detail::cpu_has_avx512(),
                             "dequantize_mxfp4_fast: the avx512 decoder needs AVX-512 F, which "
                             "this CPU or build lacks");
      decode = format_detail::dequantize_mxfp4_rows_avx512;
      break;
    default:
      format_detail::require(false, "dequantize_mxfp4_fast: unknown decoder");
  }
  decode(packed.data(), scales.data(), blocks, out.data());
}

}  // namespace mxmoe
