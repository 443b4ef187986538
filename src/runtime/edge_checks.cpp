// The checks every edge makes on a layer call's arrays (mxmoe/edge_checks.hpp).
#include "mxmoe/edge_checks.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace mxmoe {
namespace {

template <class NotFinite>
NonFinite scan(std::int64_t tokens, std::int64_t width, NotFinite not_finite) {
  NonFinite n;
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::int64_t count = 0;
    for (std::int64_t i = t * width; i < (t + 1) * width; ++i) count += not_finite(i) ? 1 : 0;
    if (count > 0) n.tokens.emplace_back(t, count);
    n.values += count;
  }
  return n;
}

// NAME's non-finite values refused: as a bad input (std::invalid_argument) or a bad output.
template <class T>
void refuse_non_finite(const char* name, const T* v, std::int64_t tokens, std::int64_t width,
                       bool output) {
  const NonFinite bad = find_non_finite(v, tokens, width);
  if (!bad.any()) return;
  if (output) throw NumericError(fmt::format("{} holds {}", name, bad.describe(tokens)));
  throw std::invalid_argument(
      fmt::format("{}: {}; a layer call needs finite inputs", name, bad.describe(tokens)));
}

}  // namespace

void require_call_tokens(const char* call, std::int64_t tokens, int top_k) {
  const std::int64_t max = std::numeric_limits<std::int32_t>::max() / std::max(top_k, 1);
  if (tokens < 0 || tokens > max)
    throw std::invalid_argument(
        fmt::format("{}: {} tokens; a call carries 0..{} (tokens x top_k are numbered in 32 bits)",
                    call, tokens, max));
}

std::string NonFinite::describe(std::int64_t total_tokens) const {
  std::string text = fmt::format("{} non-finite value{} (NaN/Inf) in {} of {} tokens: ", values,
                                 values == 1 ? "" : "s", tokens.size(), total_tokens);
  const std::size_t shown = std::min<std::size_t>(tokens.size(), 10);
  for (std::size_t i = 0; i < shown; ++i)
    text += fmt::format("{}token {} ({})", i ? ", " : "", tokens[i].first, tokens[i].second);
  if (tokens.size() > shown) text += fmt::format(", ... ({} more tokens)", tokens.size() - shown);
  return text;
}

NonFinite find_non_finite(const float* v, std::int64_t tokens, std::int64_t width) {
  return scan(tokens, width, [v](std::int64_t i) { return !std::isfinite(v[i]); });
}

NonFinite find_non_finite(const std::uint16_t* v, std::int64_t tokens, std::int64_t width) {
  return scan(tokens, width, [v](std::int64_t i) { return (v[i] & 0x7F80u) == 0x7F80u; });
}

void require_finite_input(const char* n, const float* v, std::int64_t t, std::int64_t w) {
  refuse_non_finite(n, v, t, w, false);
}
void require_finite_input(const char* n, const std::uint16_t* v, std::int64_t t, std::int64_t w) {
  refuse_non_finite(n, v, t, w, false);
}
void require_finite_output(const char* n, const float* v, std::int64_t t, std::int64_t w) {
  refuse_non_finite(n, v, t, w, true);
}
void require_finite_output(const char* n, const std::uint16_t* v, std::int64_t t, std::int64_t w) {
  refuse_non_finite(n, v, t, w, true);
}

ArrayBytes dense_bytes(const char* name, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const std::byte*>(data);
  return {name, p, p == nullptr ? p : p + bytes};
}

void require_disjoint(std::span<const ArrayBytes> inputs, std::span<const ArrayBytes> outputs) {
  const auto overlap = [](const ArrayBytes& a, const ArrayBytes& b) {
    return a.begin != a.end && b.begin != b.end && a.begin < b.end && b.begin < a.end;
  };
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    for (const ArrayBytes& in : inputs)
      if (overlap(outputs[o], in))
        throw std::invalid_argument(fmt::format(
            "{}: overlaps {}; the layer reads {} while it writes {}, pass another array",
            outputs[o].name, in.name, in.name, outputs[o].name));
    for (std::size_t p = 0; p < o; ++p)
      if (overlap(outputs[o], outputs[p]))
        throw std::invalid_argument(
            fmt::format("{}: overlaps {}; pass separate arrays", outputs[o].name, outputs[p].name));
  }
}

}  // namespace mxmoe
