// What LanguageModel holds (include/mxmoe/llm.hpp), shared by its two sources: the model
// (language_model.cpp) and the continuous batch that runs it (continuous_batch.cpp).
#pragma once

#include <vector>

#include "llm/decoder.hpp"
#include "mxmoe/llm.hpp"

namespace mxmoe {

struct LanguageModel::Impl {
  llm::Decoder decoder;
  LlmOptions options;
  std::vector<float> logits;  // [max_step_rows, vocab]: the rows of one step that ask for logits
};

namespace llm {

// Throws std::invalid_argument naming the first field of P out of range.
void check_sampling(const SamplingParams& p);

}  // namespace llm
}  // namespace mxmoe
