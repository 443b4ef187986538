// The boundary between the portable strip driver (strip_kernel.cpp) and a backend's ISA
// kernels (src/backends/<name>/kernels/*.cpp, compiled with that ISA's flags). Plain data
// and function pointers only: nothing here is inline code, so no function body can be
// compiled once with AVX-512 flags and picked by the linker for generic code.
//
// A "strip" is kStripRows weight rows of one expert over the whole reduction dimension K,
// packed as kblocks = K/32 steps of 64 nibble bytes (32 elements of each row) and
// kblocks * kStripRows E8M0 scale bytes. The nibble order inside a step is the backend's.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mxmoe::strip {

inline constexpr int kStripRows = 4;
inline constexpr int kBlockElems = 32;
inline constexpr std::size_t kStepNibbleBytes = 64;  // kStripRows rows x 32 elements x 4 bits

// How the 64 nibble bytes of one K step hold the 4 x 32 elements.
enum class NibbleOrder : std::uint8_t {
  // Row n's block is bytes [16n, 16n+16): byte j = element j (low) | element j+16 (high).
  row_blocks,
  // 32 little-endian words: word j = element j of rows 0,1,2,3 in bits 0-3,4-7,8-11,12-15.
  row_words,
};

struct PackedStrip {
  const std::uint8_t* nibbles = nullptr;  // [kblocks][64]
  const std::uint8_t* scales = nullptr;   // [kblocks][kStripRows] E8M0 codes
  std::int64_t kblocks = 0;
  // Some scale makes a scaled element unrepresentable in the decoded type (bf16: a subnormal
  // or an overflow): the kernel must decode unscaled and apply the scale to the fp32 partial.
  bool scale_outside = false;
};

// A backend's ISA kernels, as a table of plain functions.
struct StripOps {
  NibbleOrder order = NibbleOrder::row_blocks;
  // Element type of decoded weights and of the rounded GEMM inputs: 4 (float) or 2 (bf16).
  std::size_t element_bytes = 4;
  int max_tokens = 1;  // tokens per dot() call
  // Decodes a strip into `decoded` (64-byte aligned, decoded_bytes(kblocks) bytes):
  // [kblocks][kStripRows][32] elements, then [kblocks][kStripRows] float scales that the
  // kernel uses when scale_outside.
  void (*decode)(const PackedStrip& strip, void* decoded) = nullptr;
  // out[n * tokens + t] = sum_k W[n][k] * x_rows[t][k] for the decoded strip; 1 <= tokens <=
  // max_tokens. Each (n, t) is summed in an order that does not depend on `tokens`.
  void (*dot)(const void* decoded, std::int64_t kblocks, bool scale_outside,
              const void* const* x_rows, int tokens, float* out) = nullptr;
  // Optional: decode and dot product fused (decoded weights stay in registers), for an
  // expert whose tokens fit one dot() tile (1 <= tokens <= max_tokens). Must give the same
  // bits as decode() then dot(): the same weight values enter the same accumulation.
  void (*fused_dot)(const PackedStrip& strip, const void* const* x_rows, int tokens,
                    float* out) = nullptr;
};

}  // namespace mxmoe::strip
