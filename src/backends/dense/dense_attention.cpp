// The attention kernels' candidates and their verdicts (dense_attention.hpp).
#include "backends/dense/dense_attention.hpp"

#include <fmt/format.h>

#include <array>
#include <optional>

#include "backends/kernel_isa.hpp"

namespace mxmoe::dense {

namespace {

constexpr std::string_view kClass = "attention_dot8";

struct Candidate {
  AttentionKernels kernels;
  std::optional<KernelIsa> set;  // none: portable C++
};

#if MXMOE_X86_KERNELS
constexpr AttentionKernels kAvx512{"avx512_attention", &attention_dot8_scores__avx512,
                                   &attention_dot8_values__avx512, &attention_dot8_softmax__avx512};
constexpr AttentionKernels kAvx2{"avx2_attention", &attention_dot8_scores__avx2,
                                 &attention_dot8_values__avx2, &attention_dot8_softmax__avx2};
#else
constexpr AttentionKernels kAvx512{"avx512_attention", nullptr, nullptr, nullptr};
constexpr AttentionKernels kAvx2{"avx2_attention", nullptr, nullptr, nullptr};
#endif

// Best first. The avx512 kernel calls the avx2 one too (an odd head, the last keys), and the
// avx512 set's features include avx2's.
constexpr std::array<Candidate, 3> kCandidates = {{
    {kAvx512, KernelIsa::avx512},
    {kAvx2, KernelIsa::avx2},
    {AttentionKernels{}, std::nullopt},
}};

std::vector<Rejection> check(const Candidate& c, int head_dim, const Hardware& hardware) {
  std::vector<Rejection> out;
  if (!c.set) return out;  // portable C++ runs any head_dim anywhere
  if (head_dim % 8 != 0)
    out.push_back({ReasonCode::shape_alignment,
                   "the SIMD attention kernels take heads of whole 8-lane chunks",
                   "head_dim % 8 == 0", fmt::format("head_dim = {}", head_dim),
                   "the portable kernel runs it (same numerics class)"});
  for (Rejection& r : isa_rejections(*c.set, hardware)) out.push_back(std::move(r));
  return out;
}

}  // namespace

AttentionSelection judge_attention_kernels(int head_dim, const Hardware& hardware) {
  AttentionSelection s;
  for (const Candidate& c : kCandidates) {
    std::vector<Rejection> reasons = check(c, head_dim, hardware);
    const bool supported = reasons.empty();
    s.candidates.push_back({c.kernels.name, std::string(kClass), supported, std::move(reasons)});
    if (s.chosen.empty() && supported) {
      s.chosen = c.kernels.name;
      s.kernels = c.kernels;
    }
  }
  return s;
}

std::string describe(const AttentionSelection& s) {
  return fmt::format("attention: {}\n", s.chosen) + describe_verdicts(s.candidates, s.chosen);
}

}  // namespace mxmoe::dense
