// The instruction loops behind the machine limits. Each is compiled for its ISA with a
// function-level target attribute (src/ is built without ISA flags); callers check the
// Hardware first. A loop of the other architecture is a stub returning 0 (never called:
// that Hardware has none of its features). Every loop returns a checksum so the compiler cannot drop the work.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mxmoe::perf::loops {

// Sums `bytes` (a multiple of 512, 64-byte aligned) with 64-bit adds, 8 independent
// accumulators, full-width loads.
std::uint64_t read_avx512(const std::byte* data, std::size_t bytes);
std::uint64_t read_avx2(const std::byte* data, std::size_t bytes);
std::uint64_t read_scalar(const std::byte* data, std::size_t bytes);
std::uint64_t read_neon(const std::byte* data, std::size_t bytes);  // aarch64: 128-bit loads

// Compute loops: `iterations` rounds over independent accumulator chains (enough to cover
// the instruction latency on two ports). The ops done are iterations x ops_per_iteration.
inline constexpr std::size_t kChains = 16;
inline constexpr double kFmaAvx512Ops = kChains * 16 * 2;     // vfmadd231ps zmm
inline constexpr double kFmaAvx2Ops = kChains * 8 * 2;        // vfmadd231ps ymm
inline constexpr double kBf16DpAvx512Ops = kChains * 32 * 2;  // vdpbf16ps zmm: 32 products
inline constexpr double kVnniAvx512Ops = kChains * 64 * 2;    // vpdpbusd zmm: 64 products
inline constexpr double kMaddubsAvx2Ops = kChains * 32 * 2;   // vpmaddubsw ymm: 32 products
inline constexpr double kMaddwdAvx2Ops = kChains * 16 * 2;    // vpmaddwd ymm: 16 products
inline constexpr double kVnniAvxOps = kChains * 32 * 2;       // vpdpbusd ymm (VEX): 32 products
// AMX: 4 accumulator tiles (2x2 blocking), 16 rows x 64 bytes each.
inline constexpr double kAmxInt8Ops = 4.0 * 16 * 16 * 64 * 2;  // tdpbssd: 16x16x64 products
inline constexpr double kAmxBf16Ops = 4.0 * 16 * 16 * 32 * 2;  // tdpbf16ps: 16x16x32

// aarch64 (Advanced SIMD, 128-bit): the instructions of neon_int16, neon_dotprod_int8 and
// neon_i8mm_int8, and the float FMA of the reference path; SVE's sdot at the machine's vector
// length (VL/8 products an instruction: the caller scales by Hardware.sve_vector_bits).
inline constexpr double kFmaNeonOps = kChains * 4 * 2;     // fmla .4s
inline constexpr double kSmlalNeonOps = kChains * 4 * 2;   // smlal .4s: 4 int16 products
inline constexpr double kSdotNeonOps = kChains * 16 * 2;   // sdot .4s: 16 products
inline constexpr double kSmmlaNeonOps = kChains * 32 * 2;  // smmla: 2x2x8 products
inline constexpr double sdot_sve_ops(int vector_bits) {
  return static_cast<double>(kChains) * (vector_bits / 8) * 2.0;
}

double fma_neon(std::int64_t iterations);
double smlal_neon(std::int64_t iterations);
double sdot_neon(std::int64_t iterations);
double smmla_neon(std::int64_t iterations);
double sdot_sve(std::int64_t iterations);

double fma_avx512(std::int64_t iterations);
double fma_avx2(std::int64_t iterations);
double bf16_dp_avx512(std::int64_t iterations);
double vnni_avx512(std::int64_t iterations);
double maddubs_avx2(std::int64_t iterations);
double maddwd_avx2(std::int64_t iterations);
double vnni_avx(std::int64_t iterations);
// Configure tiles on the calling thread, loop, release. Need the AMX permission first.
double amx_int8(std::int64_t iterations);
double amx_bf16(std::int64_t iterations);

}  // namespace mxmoe::perf::loops
