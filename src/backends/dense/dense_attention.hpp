// The choice of a decoder's attention kernels (attention_kernels.hpp for what they compute):
// like a Linear's, each candidate has a name, the numerics class attention_dot8 and a check()
// that returns every reason it cannot run here; the first accepted one is bound once, at the
// decoder's construction, and every verdict is kept for `describe`. All candidates give the
// same bits, so the choice changes the speed only.
#pragma once

#include <string>
#include <vector>

#include "backends/dense/attention_kernels.hpp"
#include "backends/dense/dense_linear.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe::dense {

struct AttentionKernels {
  const char* name = "portable_attention";
  AttentionScoresFn scores = &attention_dot8_scores__portable;
  AttentionValuesFn values = &attention_dot8_values__portable;
  AttentionSoftmaxFn softmax = &attention_dot8_softmax__portable;
};

struct AttentionSelection {
  std::string chosen;
  std::vector<Verdict> candidates;  // best first (mxmoe::Verdict, no estimate: the first runs)
  AttentionKernels kernels;         // the chosen one's entries
};

// The candidates for heads of HEAD_DIM floats on HARDWARE (pure: a capped or replayed Hardware
// judges as the machine it describes). The portable one accepts every head_dim.
AttentionSelection judge_attention_kernels(int head_dim, const Hardware& hardware);
// A few lines for `explain`: the choice, then one line per candidate with its reasons.
std::string describe(const AttentionSelection&);

}  // namespace mxmoe::dense
