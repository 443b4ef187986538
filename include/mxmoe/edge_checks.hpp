// The one contract of mxmoe's edges (the C API, the Python package, the command line) for the
// arrays of a layer call, with one message format for each refusal (docs/RELIABILITY.md):
//   - a non-finite input value (NaN/Inf in x) is the caller's error, naming the tokens
//     (std::invalid_argument: MXMOE_ERROR_INVALID_ARGUMENT, ValueError, exit 1 for a file);
//   - a non-finite output value is a NumericError naming the count and the tokens
//     (MXMOE_ERROR_NON_FINITE, mxmoe.NumericError, exit 1);
//   - an output overlapping an input or another output is the caller's error, naming both.
// Each check is one pass over its array, done at the edge around the forward, never inside a
// kernel; none allocates unless it finds something to report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mxmoe/export.h"

namespace mxmoe {

// Throws std::invalid_argument "CALL: N tokens; a call carries 0..MAX (...)" unless TOKENS is in
// [0, 2^31 / top_k): the bound of every layer call (tokens x top_k slots are numbered in 32
// bits), checked before any size is computed from TOKENS.
MXMOE_API void require_call_tokens(const char* call, std::int64_t tokens, int top_k);

// Non-finite values of an array [tokens, width]: per token with any, the count.
struct MXMOE_API NonFinite {
  std::int64_t values = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> tokens;  // (token, count)
  bool any() const { return values > 0; }
  // "3 non-finite values (NaN/Inf) in 2 of 16 tokens: token 4 (2), token 9 (1)"
  std::string describe(std::int64_t total_tokens) const;
};
MXMOE_API NonFinite find_non_finite(const float* v, std::int64_t tokens, std::int64_t width);
// bf16 bit patterns (exponent all ones: Inf or NaN).
MXMOE_API NonFinite find_non_finite(const std::uint16_t* v, std::int64_t tokens,
                                    std::int64_t width);

// A layer call's output holds NaN/Inf (a legal checkpoint can overflow float32: an E8M0 scale
// of 254; so can routing weights near the float range).
class MXMOE_API NumericError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws std::invalid_argument "NAME: 2 non-finite values (NaN/Inf) in 1 of 4 tokens: token 3
// (2); a layer call needs finite inputs" when V [tokens, width] (float32, or bf16 bits) holds any.
MXMOE_API void require_finite_input(const char* name, const float* v, std::int64_t tokens,
                                    std::int64_t width);
MXMOE_API void require_finite_input(const char* name, const std::uint16_t* v, std::int64_t tokens,
                                    std::int64_t width);
// Throws NumericError "NAME holds 3 non-finite values (NaN/Inf) in 2 of 16 tokens: ..." (the
// command line's wording) when V [tokens, width] holds any.
MXMOE_API void require_finite_output(const char* name, const float* v, std::int64_t tokens,
                                     std::int64_t width);
MXMOE_API void require_finite_output(const char* name, const std::uint16_t* v, std::int64_t tokens,
                                     std::int64_t width);

// The bytes [begin, end) an array of a layer call spans (for a strided array: from its lowest
// to one past its highest element byte). An empty range (begin == end) overlaps nothing.
struct ArrayBytes {
  const char* name;
  const std::byte* begin;
  const std::byte* end;
};
// The span of a dense array of BYTES bytes at DATA (NULL or 0 bytes: empty).
MXMOE_API ArrayBytes dense_bytes(const char* name, const void* data, std::size_t bytes);
// Throws std::invalid_argument "NAME_OUT: overlaps NAME_IN; the layer reads NAME_IN while it
// writes NAME_OUT, pass another array" when an output shares a byte with an input or with
// another output. Every edge checks every array of a call with it.
MXMOE_API void require_disjoint(std::span<const ArrayBytes> inputs,
                                std::span<const ArrayBytes> outputs);

}  // namespace mxmoe
